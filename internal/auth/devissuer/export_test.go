package devissuer

import "time"

// SetClock replaces the issuer's clock (code and token expiry). Call it before serving.
func SetClock(i *Issuer, now func() time.Time) { i.now = now }
