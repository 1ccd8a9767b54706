package identity

// FailOpenPending makes opening the pending file fail with err until the returned restore runs.
func FailOpenPending(err error) (restore func()) {
	openPending = func(string, int, uint32) (int, error) { return -1, err }
	return func() { openPending = unixOpen }
}
