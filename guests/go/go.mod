module reconciled.dev/guest

go 1.25.0

require go.bytecodealliance.org/pkg v0.2.3
