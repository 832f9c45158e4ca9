package main

// The statement table's id mapping and the types resent are in track_test.go; here re-preparation
// against an owner (owner_test.go): every open statement prepared again in one round trip, mapped
// to the new owner's ids, and a refusal that fails the move without leaving answers unread.

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// execute is a COM_STMT_EXECUTE of statement `id` with one parameter; types: the new-parameters
// flag and the types, or nil (a later execute, the types already sent).
func execute(id uint32, types []byte) []byte {
	b := binary.LittleEndian.AppendUint32([]byte{comStmtExecute}, id)
	b = append(b, 0)                           // flags: no cursor
	b = binary.LittleEndian.AppendUint32(b, 1) // iteration count
	b = append(b, 0)                           // NULL bitmap of one parameter
	if types != nil {
		b = append(append(b, 1), types...)
	} else {
		b = append(b, 0)
	}
	return append(b, 5, 0, 0, 0, 0, 0, 0, 0) // the value
}

func TestReprepareMapsEveryStatementToTheNewOwnerAndResendsTheTypes(t *testing.T) {
	owner := newFakeOwner(t, 500)
	rt := newRouter(time.Second)
	r := owner.route("t1", 2).route
	cn := &clientConn{t: newTracker(true)}
	s := cn.t.stmts
	s.sentPrepare([]byte("SELECT ?"))
	s.answered(prepareOK(900, 0, 1))
	s.sentPrepare([]byte("SELECT 1"))
	s.answered(prepareOK(901, 1, 0))
	cn.stmtCommand(execute(1, []byte{8, 0})) // the old owner got the types
	conn, br, _, err := rt.loginOwner(&r, &response{caps: routerCaps, maxPkt: 1 << 24, charset: 33, user: "app@t1"},
		make([]byte, 20))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := s.reprepare(conn, br, true); err != nil {
		t.Fatal(err)
	}
	owners := map[uint32]bool{}
	for id, st := range s.byClient {
		if st.owner <= 500 || st.owner > 502 {
			t.Fatalf("statement %d still maps to %d, not to the new owner's ids", id, st.owner)
		}
		owners[st.owner] = true
	}
	if len(owners) != 2 {
		t.Fatalf("two statements, new owner ids %v", owners)
	}
	out := cn.stmtCommand(execute(1, nil)) // the client does not send the types again
	flag := 10 + 1
	if out[flag] != 1 || out[flag+1] != 8 || !owners[binary.LittleEndian.Uint32(out[1:])] {
		t.Fatalf("the first execute on the new owner lacks the types or the new id: % x", out)
	}
	if again := cn.stmtCommand(execute(1, nil)); again[flag] != 0 {
		t.Fatal("the types were sent twice to the same owner")
	}
}

func TestAStatementTheNewOwnerRefusesFailsTheMoveAfterReadingEveryAnswer(t *testing.T) {
	owner := newFakeOwner(t, 500)
	owner.refuse = "gone"
	rt := newRouter(time.Second)
	r := owner.route("t1", 2).route
	s := newStmtTable()
	for i, sql := range []string{"SELECT a FROM gone WHERE x=?", "SELECT ?", "SELECT 2"} {
		s.sentPrepare([]byte(sql))
		s.answered(prepareOK(uint32(900+i), 0, 1))
	}
	conn, br, _, err := rt.loginOwner(&r, &response{caps: routerCaps, maxPkt: 1 << 24, charset: 33, user: "app@t1"},
		make([]byte, 20))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := s.reprepare(conn, br, true); !errors.Is(err, errRefused) {
		t.Fatalf("a refused statement did not fail the move: %v", err)
	}
	// the connection is still in step: a query now gets its own answer, not a leftover prepare's
	if err := simpleQuery(conn, br, "SELECT 1"); err != nil {
		t.Fatalf("answers left unread on the owner connection: %v", err)
	}
}
