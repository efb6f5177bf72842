package ledger

// AbandonForTest releases the Reporter's spool file as a killed process
// would: no flush, no final reports; what was not durable is gone.
func (r *Reporter) AbandonForTest() {
	if r.stop != nil {
		close(r.stop)
		<-r.done
		r.stop = nil
	}
	_ = r.spool.Close()
}
