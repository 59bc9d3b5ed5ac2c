module reconciled.dev/examples/reservation-go

go 1.25.0

require reconciled.dev/guest v0.0.0

require go.bytecodealliance.org/pkg v0.2.3 // indirect

// The SDK is not published: it is the one in this checkout.
replace reconciled.dev/guest => ../../guests/go
