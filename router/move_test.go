package main

// The move of an open connection between owners (move.go, router.go's beforeCommand and move),
// against fake owners (owner_test.go): what the session carries, when a connection moves, stays
// or ends, and what its client is told. Reading the session tracker and what pins a session are
// in track_test.go.

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

func TestVariablesAreReplayedQuotedAndReadOnlyOnesLeftOut(t *testing.T) {
	s := sessionState{sysvars: map[string]string{"sql_mode": "it's", "last_gtid": "0-1-5", "time_zone": `a\b`,
		"bad name": "x"}}
	got := strings.Join(s.replay(), ", ")
	if want := "`sql_mode`='it''s', `time_zone`='a\\\\b'"; got != want {
		t.Fatalf("replay %s, want %s", got, want)
	}
}

// connected is a client connection to owner A (epoch 1), its client side, and the tenant's stats.
func connected(t *testing.T, rt *Router, a *fakeOwner) (*clientConn, net.Conn) {
	t.Helper()
	if err := rt.apply(a.route("t1", 1)); err != nil {
		t.Fatal(err)
	}
	r, st := rt.lookup("t1")
	resp := &response{caps: routerCaps, maxPkt: 1 << 24, charset: 33, user: "app@t1"}
	s, sr, _, err := rt.loginOwner(r, resp, make([]byte, 20))
	if err != nil {
		t.Fatal(err)
	}
	client, mine := net.Pipe()
	t.Cleanup(func() { client.Close(); mine.Close() })
	tr := newTracker(true)
	cn := &clientConn{rt: rt, tenant: "t1", c: mine, cr: bufio.NewReader(mine), st: st, t: tr, resp: resp,
		stage1: make([]byte, 20), owner: s, ownerR: sr, epoch: 1}
	st.add(tr)
	cn.startRelay()
	return cn, client
}

func TestAConnectionBetweenStatementsMovesWithItsSession(t *testing.T) {
	a, b := newFakeOwner(t, 100), newFakeOwner(t, 500)
	rt := newRouter(time.Second)
	cn, _ := connected(t, rt, a)
	cn.t.sess.db, cn.t.sess.sysvars = "shop", map[string]string{"sql_mode": "ANSI"} // as its tracker told

	cn.t.stmts.sentPrepare([]byte("SELECT ?"))
	cn.t.stmts.answered(prepareOK(101, 0, 1))
	if err := rt.apply(b.route("t1", 2)); err != nil {
		t.Fatal(err)
	}
	ok, answered := cn.beforeCommand(append([]byte{comQuery}, "SELECT 1"...))
	if !ok || answered {
		t.Fatalf("the connection did not move: ok %v answered %v", ok, answered)
	}
	if cn.epoch != 2 || cn.st.moves.Load() != 1 {
		t.Fatalf("epoch %d, moves %d after the move", cn.epoch, cn.st.moves.Load())
	}
	if len(b.logins) != 1 || b.logins[0].db != "shop" || b.logins[0].user != "app" {
		t.Fatalf("the new owner's login: %+v", b.logins)
	}
	var sawVars, sawPrepare bool
	for _, c := range b.seen() {
		sawVars = sawVars || (c[0] == comQuery && strings.Contains(string(c[1:]), "`sql_mode`='ANSI'"))
		sawPrepare = sawPrepare || (c[0] == comStmtPrepare && string(c[1:]) == "SELECT ?")
	}
	if !sawVars || !sawPrepare {
		t.Fatalf("the new owner was not given the variables (%v) or the statement (%v)", sawVars, sawPrepare)
	}
	if st := cn.t.stmts.byClient[1]; st == nil || st.owner <= 500 {
		t.Fatal("the statement does not map to the new owner's id")
	}
}

func TestAConnectionWithAResponseOutstandingStaysUntilAnswered(t *testing.T) {
	a, b := newFakeOwner(t, 100), newFakeOwner(t, 500)
	rt := newRouter(time.Second)
	cn, _ := connected(t, rt, a)
	cn.t.sent(comQuery) // a statement on its way on A
	rt.apply(b.route("t1", 2))
	if ok, _ := cn.beforeCommand([]byte{comQuery, 'x'}); !ok || cn.epoch != 1 || len(b.logins) != 0 {
		t.Fatalf("a connection in mid-statement moved (epoch %d, logins on B %d)", cn.epoch, len(b.logins))
	}
}

func TestAPinnedSessionEndsAtTheMoveAndItsClientIsToldWhy(t *testing.T) {
	a, b := newFakeOwner(t, 100), newFakeOwner(t, 500)
	rt := newRouter(time.Second)
	cn, client := connected(t, rt, a)
	cn.t.sess.checkCommand(append([]byte{comQuery}, "SET @v = 1"...))
	rt.apply(b.route("t1", 2))
	got := make(chan []byte, 1)
	go func() {
		_, p, _ := readPacket(bufio.NewReader(client))
		got <- p
	}()
	if ok, _ := cn.beforeCommand([]byte{comQuery, 'x'}); ok {
		t.Fatal("a pinned session went on after the move")
	}
	p := <-got
	if len(p) < 3 || p[0] != 0xff || int(p[1])|int(p[2])<<8 != erConnectionKilled ||
		!strings.Contains(errText(p), "a user variable") {
		t.Fatalf("the client was told % x (%s)", p, errText(p))
	}
	if cn.st.endedAtMove.Load() != 1 || len(b.logins) != 0 {
		t.Fatal("the end at the move is not counted, or the session logged in to the new owner")
	}
}

func TestATransactionOpenAtTheMoveIsRolledBackAndItsNextStatementToldToRestart(t *testing.T) {
	a, b := newFakeOwner(t, 100), newFakeOwner(t, 500)
	rt := newRouter(time.Second)
	cn, client := connected(t, rt, a)
	cn.t.inTrans.Store(true) // BEGIN answered on A
	rt.apply(b.route("t1", 2))
	got := make(chan []byte, 1)
	go func() {
		_, p, _ := readPacket(bufio.NewReader(client))
		got <- p
	}()
	ok, answered := cn.beforeCommand(append([]byte{comQuery}, "UPDATE t SET a = 1"...))
	if !ok || !answered {
		t.Fatalf("ok %v answered %v: the statement of a lost transaction must be answered by the router", ok, answered)
	}
	if p := <-got; p[0] != 0xff || int(p[1])|int(p[2])<<8 != 1213 {
		t.Fatalf("the client was told % x, want error 1213 (restart the transaction)", p)
	}
	if cn.epoch != 2 || cn.st.rolledBackAtMove.Load() != 1 || cn.t.inTrans.Load() {
		t.Fatal("the connection did not move on, or the rollback is not counted")
	}
}
