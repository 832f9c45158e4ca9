package main

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func ok(status uint16) []byte {
	p := []byte{0x00, 0, 0}
	p = binary.LittleEndian.AppendUint16(p, status)
	return append(p, 0, 0)
}

func eof(status uint16) []byte {
	p := []byte{0xfe, 0, 0}
	return binary.LittleEndian.AppendUint16(p, status)
}

func okEOF(status uint16) []byte { // CLIENT_DEPRECATE_EOF's terminator
	p := ok(status)
	p[0] = 0xfe
	return p
}

func feed(t *tracker, pkts ...[]byte) {
	for _, p := range pkts {
		t.packet(p, len(p))
	}
}

func TestTransactionFlagsFromOK(t *testing.T) {
	tr := newTracker(true)
	tr.sent(comQuery)
	if tr.idle() {
		t.Fatal("idle while a response is outstanding")
	}
	feed(tr, ok(statusInTrans|statusAutocommit))
	if !tr.inTrans.Load() || tr.idle() {
		t.Fatal("BEGIN's OK not seen as inside a transaction")
	}
	tr.sent(comQuery)
	feed(tr, ok(statusAutocommit))
	if tr.inTrans.Load() || !tr.idle() {
		t.Fatal("COMMIT's OK not seen as the end")
	}
}

func TestResultSetWithAndWithoutEOF(t *testing.T) {
	col := []byte{3, 'd', 'e', 'f'}
	row := []byte{0x00, 1, '1'} // a binary row starts with 0x00: must not read as an OK
	for _, deprecate := range []bool{false, true} {
		tr := newTracker(deprecate)
		tr.sent(comStmtExecute)
		pkts := [][]byte{{2}, col, col}
		if !deprecate {
			pkts = append(pkts, eof(statusInTrans))
		}
		pkts = append(pkts, row, row)
		if deprecate {
			pkts = append(pkts, okEOF(statusInTrans))
		} else {
			pkts = append(pkts, eof(statusInTrans))
		}
		feed(tr, pkts...)
		if tr.awaiting.Load() != 0 || !tr.inTrans.Load() {
			t.Fatalf("deprecateEOF=%v: result set not closed (awaiting %d) or status lost", deprecate, tr.awaiting.Load())
		}
		tr.sent(comQuery)
		feed(tr, ok(0))
		if !tr.idle() {
			t.Fatalf("deprecateEOF=%v: not idle after the next OK", deprecate)
		}
	}
}

func TestPrepareMultiResultsErrorsAndPipelining(t *testing.T) {
	tr := newTracker(false)
	// PREPARE with 2 parameters and 1 column, then EXECUTE pipelined behind it.
	tr.sent(comStmtPrepare)
	tr.sent(comStmtExecute)
	prep := []byte{0x00, 1, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0}
	def := []byte{3, 'd', 'e', 'f'}
	feed(tr, prep, def, def, eof(0), def, eof(0))
	if tr.awaiting.Load() != 1 {
		t.Fatalf("prepare response not closed: awaiting %d", tr.awaiting.Load())
	}
	feed(tr, ok(0))
	if !tr.idle() {
		t.Fatal("not idle after the pipelined EXECUTE's OK")
	}
	// A CALL with two results: the first OK says more results follow.
	tr.sent(comQuery)
	feed(tr, ok(statusMoreResults))
	if tr.awaiting.Load() != 1 {
		t.Fatal("a response with more results closed early")
	}
	feed(tr, ok(0))
	if !tr.idle() {
		t.Fatal("multi-result response not closed")
	}
	// An error: the transaction state is unknown until the next status, so not idle.
	tr.sent(comQuery)
	feed(tr, []byte{0xff, 0x25, 0x05, '#', '4', '0', '0', '0', '1', 'x'})
	if tr.idle() || tr.awaiting.Load() != 0 {
		t.Fatal("after an error the connection must not count as between statements")
	}
	tr.sent(comQuery)
	feed(tr, ok(0))
	if !tr.idle() {
		t.Fatal("the next OK must settle the state")
	}
	// With autocommit on, a failed statement outside a transaction is its own (rolled back) one.
	tr.sent(comQuery)
	feed(tr, ok(statusAutocommit))
	tr.sent(comQuery)
	feed(tr, []byte{0xff, 0x26, 0x04, '#', '2', '3', '0', '0', '0', 'x'})
	if !tr.idle() {
		t.Fatal("a failed autocommit statement left the connection inside a transaction")
	}
	// A deadlock inside a transaction rolls it all back; another error leaves it open.
	tr.sent(comQuery)
	feed(tr, ok(statusAutocommit|statusInTrans))
	tr.sent(comQuery)
	feed(tr, []byte{0xff, 0x26, 0x04, '#', '2', '3', '0', '0', '0', 'x'})
	if !tr.inTrans.Load() {
		t.Fatal("a failed statement ended its transaction")
	}
	tr.sent(comQuery)
	feed(tr, []byte{0xff, 0xbd, 0x04, '#', '4', '0', '0', '0', '1', 'x'})
	if !tr.idle() {
		t.Fatal("a deadlock left the connection inside a transaction")
	}
	// COM_STMT_CLOSE gets no answer; COM_STATISTICS a bare string.
	tr.sent(comStmtClose)
	tr.sent(comStatistics)
	feed(tr, []byte("Uptime: 5"))
	if !tr.idle() {
		t.Fatal("COM_STATISTICS's string not taken as its whole answer")
	}
}

func TestNativePasswordRoundTrip(t *testing.T) {
	pw := []byte("s3cret")
	stage1 := sha1Sum(pw)
	stage2 := sha1Sum(stage1)
	scramble := newScramble()
	answer := xor(sha1Sum(scramble, stage2), stage1) // what a client sends
	got, ok := recoverStage1(scramble, answer, stage2)
	if !ok || string(got) != string(stage1) {
		t.Fatal("a right password was refused")
	}
	if _, ok := recoverStage1(scramble, xor(sha1Sum(scramble, stage2), sha1Sum([]byte("wrong"))), stage2); ok {
		t.Fatal("a wrong password was accepted")
	}
	owner := newScramble()
	if string(nativeAnswer(owner, got, stage2)) != string(xor(sha1Sum(owner, stage2), stage1)) {
		t.Fatal("the answer to the owner is not what a client with the password would send")
	}
}

func TestSplitUser(t *testing.T) {
	for in, want := range map[string][2]string{"app@t1": {"app", "t1"}, "a@b@t2": {"a@b", "t2"}} {
		u, tn, ok := splitUser(in)
		if !ok || u != want[0] || tn != want[1] {
			t.Fatalf("%s -> %s %s", in, u, tn)
		}
	}
	for _, bad := range []string{"app", "@t1", "app@"} {
		if _, _, ok := splitUser(bad); ok {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func lenencStr(s string) []byte { return append(appendLenenc(nil, uint64(len(s))), s...) }

// okWithTrackers builds an OK packet of a session-tracking owner: info, then the trackers.
func okWithTrackers(info string, entries ...[]byte) []byte {
	p := []byte{0x00, 0, 0}
	p = binary.LittleEndian.AppendUint16(p, statusAutocommit|statusStateChanged)
	p = append(p, 0, 0)
	p = append(p, lenencStr(info)...)
	var all []byte
	for _, e := range entries {
		all = append(all, e...)
	}
	return append(p, append(appendLenenc(nil, uint64(len(all))), all...)...)
}

func entry(typ byte, data []byte) []byte {
	return append(append([]byte{typ}, appendLenenc(nil, uint64(len(data)))...), data...)
}

func TestSessionTrackerKeepsWhatItCanCarry(t *testing.T) {
	s := &sessionState{}
	p := okWithTrackers("", entry(trackSysvars, append(lenencStr("sql_mode"), lenencStr("ANSI_QUOTES")...)),
		entry(trackSchema, lenencStr("shop")), entry(trackStateChange, lenencStr("1")))
	out := s.okSession(p)
	if s.db != "shop" || s.sysvars["sql_mode"] != "ANSI_QUOTES" || s.pinned.Load() {
		t.Fatalf("db %q vars %v pinned %v", s.db, s.sysvars, s.pinned.Load())
	}
	// A client that did not ask for session tracking gets the OK without it (and without the flag).
	if len(out) != 7 || binary.LittleEndian.Uint16(out[3:])&statusStateChanged != 0 {
		t.Fatalf("tracker not stripped: % x", out)
	}
	// A state change with nothing the router can name (a user variable, a temporary table) pins.
	s.okSession(okWithTrackers("", entry(trackStateChange, lenencStr("1"))))
	if !s.pinned.Load() {
		t.Fatal("an unexplained state change did not pin the session")
	}
	s2 := &sessionState{sysvars: map[string]string{"last_gtid": "0-1-5", "time_zone": "+02:00", "x'y": "z"}}
	if got := s2.replay(); len(got) != 1 || got[0] != "`time_zone`='+02:00'" {
		t.Fatalf("replay %v", got)
	}
}

func TestCommandsThatPin(t *testing.T) {
	for q, pins := range map[string]bool{
		"SELECT @@version_comment LIMIT 1": false, "SET @x = 1": true, "select a from t where b = @v": true,
		"CREATE TEMPORARY TABLE t (i int)": true, "select get_lock('a', 1)": true, "SELECT 1": false,
		"SET NAMES utf8mb4": false, "PREPARE s FROM 'select 1'": true,
	} {
		s := &sessionState{}
		s.checkCommand(append([]byte{comQuery}, q...))
		if s.pinned.Load() != pins {
			t.Errorf("%q: pinned %v", q, s.pinned.Load())
		}
	}
	s := &sessionState{}
	s.checkCommand(append([]byte{comStmtPrepare}, "SELECT c FROM t WHERE id = ?"...))
	if s.pinned.Load() {
		t.Error("a binary prepared statement pinned (they are prepared again on a new owner)")
	}
	s.checkCommand(append([]byte{comStmtPrepare}, "SELECT GET_LOCK(?, 1)"...))
	if !s.pinned.Load() {
		t.Error("a prepared GET_LOCK did not pin")
	}
}

// prepareOK is the first packet of a prepare's answer: owner id, columns, parameters.
func prepareOK(id uint32, cols, params uint16) []byte {
	p := []byte{0x00, 0, 0, 0, 0, byte(cols), byte(cols >> 8), byte(params), byte(params >> 8), 0, 0, 0}
	binary.LittleEndian.PutUint32(p[1:], id)
	return p
}

func TestStatementIdsMappedAndTypesResent(t *testing.T) {
	cn := &clientConn{t: newTracker(true)}
	s := cn.t.stmts
	s.sentPrepare([]byte("SELECT ?"))
	s.sentPrepare([]byte("bad"))
	s.sentPrepare([]byte("UPDATE t SET a = ? WHERE id = ?"))
	first := prepareOK(7, 1, 1)
	s.answered(first)
	s.answered([]byte{0xff, 0x28, 0x04})
	second := prepareOK(9, 0, 2)
	s.answered(second)
	if binary.LittleEndian.Uint32(first[1:]) != 1 || binary.LittleEndian.Uint32(second[1:]) != 2 {
		t.Fatalf("client ids %v %v", first[1:5], second[1:5])
	}
	// execute 2 with types: owner id 9, the types remembered.
	exec := []byte{comStmtExecute, 2, 0, 0, 0, 0, 1, 0, 0, 0, 0x00, 1, 3, 0, 8, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}
	out := cn.stmtCommand(exec)
	if binary.LittleEndian.Uint32(out[1:]) != 9 || !bytes.Equal(out[5:], exec[5:]) {
		t.Fatalf("execute as sent %v", out)
	}
	// After a move (owner id 4, types not sent there), an execute without types gets them.
	s.byClient[2].owner, s.byClient[2].typesOnOwner = 4, false
	noTypes := []byte{comStmtExecute, 2, 0, 0, 0, 0, 1, 0, 0, 0, 0x00, 0, 5, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0}
	out = cn.stmtCommand(noTypes)
	want := []byte{comStmtExecute, 4, 0, 0, 0, 0, 1, 0, 0, 0, 0x00, 1, 3, 0, 8, 0, 5, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0}
	if !bytes.Equal(out, want) {
		t.Fatalf("execute after a move\n got %v\nwant %v", out, want)
	}
	if again := cn.stmtCommand(noTypes); again[11] != 0 {
		t.Fatal("types sent twice to the same owner")
	}
	cn.stmtCommand([]byte{comStmtClose, 1, 0, 0, 0})
	if _, ok := s.byClient[1]; ok || len(s.byClient) != 1 {
		t.Fatal("a closed statement is still mapped")
	}
}
