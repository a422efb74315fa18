package admin

// Rewrite writes a stream archive again, each consumer's entry changed.
var Rewrite = rewrite
