package natsserver

// The names the external tests need.
const (
	LockFile = lockFile
	ChildEnv = childEnv
	ChildArg = childArg
)
