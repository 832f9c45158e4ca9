package main

import (
	"strings"
	"testing"
	"time"
)

func TestStatementAndTransactionLatency(t *testing.T) {
	tr := newTracker(true)
	tr.lat = &latencyStats{}
	// An autocommit statement: one statement, one transaction.
	tr.sent(comQuery)
	time.Sleep(20 * time.Millisecond)
	feed(tr, ok(statusAutocommit))
	// BEGIN; INSERT; COMMIT with 30 ms of the client's own time between them: three statements, one transaction
	// from BEGIN's arrival to COMMIT's answer (the server's transaction time counts the same gaps).
	start := time.Now()
	tr.sent(comQuery)
	feed(tr, ok(statusInTrans|statusAutocommit))
	time.Sleep(30 * time.Millisecond)
	tr.sent(comStmtExecute)
	time.Sleep(10 * time.Millisecond)
	feed(tr, ok(statusInTrans|statusAutocommit))
	tr.sent(comQuery)
	feed(tr, ok(statusAutocommit))
	txn := time.Since(start)
	// A ping is the driver's, not a statement.
	tr.sent(0x0e)
	feed(tr, ok(statusAutocommit))

	st, tx := &tr.lat.statements, &tr.lat.transactions
	if n := st.count.Load(); n != 4 {
		t.Fatalf("statements counted %d, want 4", n)
	}
	if n := tx.count.Load(); n != 2 {
		t.Fatalf("transactions counted %d, want 2", n)
	}
	sum := time.Duration(tx.sumNs.Load())
	if sum < 20*time.Millisecond+40*time.Millisecond || sum > 20*time.Millisecond+txn+20*time.Millisecond {
		t.Fatalf("transactions' sum %v, want about 20ms + %v", sum, txn)
	}
	if s := time.Duration(st.sumNs.Load()); s < 30*time.Millisecond || s > 60*time.Millisecond+txn-40*time.Millisecond {
		t.Fatalf("statements' sum %v: the client's time between statements must not count", s)
	}
}

func TestPipelinedStatementsEndTheTransactionWithTheLast(t *testing.T) {
	tr := newTracker(true)
	tr.lat = &latencyStats{}
	tr.sent(comQuery)
	tr.sent(comQuery) // sent before the first answer: one transaction's worth of waiting
	feed(tr, ok(statusAutocommit))
	if n := tr.lat.transactions.count.Load(); n != 0 {
		t.Fatalf("a transaction ended with a statement still outstanding (%d)", n)
	}
	feed(tr, ok(statusAutocommit))
	if n := tr.lat.transactions.count.Load(); n != 1 {
		t.Fatalf("transactions %d, want 1", n)
	}
}

func TestHistogramText(t *testing.T) {
	var h histogram
	h.observe(3 * time.Millisecond)
	h.observe(200 * time.Millisecond)
	var b strings.Builder
	h.write(&b, "m", "t1")
	out := b.String()
	for _, want := range []string{`m_bucket{tenant="t1",le="0.0025"} 0`, `m_bucket{tenant="t1",le="0.005"} 1`,
		`m_bucket{tenant="t1",le="0.25"} 2`, `m_bucket{tenant="t1",le="+Inf"} 2`, `m_sum{tenant="t1"} 0.203000000`,
		`m_count{tenant="t1"} 2`} {
		if !strings.Contains(out, want+"\n") {
			t.Fatalf("missing %q in\n%s", want, out)
		}
	}
}
