//! Delta FIFO (being written).
