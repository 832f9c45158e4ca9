package main

// Binary-protocol prepared statements across a move.
//
// The client sees statement ids the router hands out (1, 2, ... per connection), never the
// owner's. The router keeps each statement's SQL text and its parameter count (from the
// COM_STMT_PREPARE and its answer) and rewrites the id in every command that names a statement
// (EXECUTE, SEND_LONG_DATA, CLOSE, RESET, FETCH). When the connection moves, every open statement
// is prepared again on the new owner and the ids are mapped to the new owner's. A client sends
// its parameters' types only with the first execute (or when they change); the new owner has
// not seen them, so the first execute of a statement on a new owner that comes without types
// gets the types the router saw last.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
)

const (
	comStmtReset = 0x1a
	// The bytes of an execute that hold everything the router reads or rewrites (id, flags,
	// iteration count, NULL bitmap of up to 65535 parameters, the new-parameters flag).
	stmtPrefixLen = 10 + (65535+7)/8 + 1
)

func isStmtCommand(cmd byte) bool {
	switch cmd {
	case comStmtExecute, comStmtSendLong, comStmtClose, comStmtReset, comStmtFetch:
		return true
	}
	return false
}

type preparedStmt struct {
	sql          []byte
	params       int
	owner        uint32 // its id on the current owner
	types        []byte // the parameter types last sent (2 bytes each); nil until an execute sent them
	typesOnOwner bool   // the current owner has been sent the types since it prepared the statement
}

type stmtTable struct {
	mu       sync.Mutex
	next     uint32
	byClient map[uint32]*preparedStmt
	pending  [][]byte // SQL of prepares sent and not yet answered, in order
}

func newStmtTable() *stmtTable { return &stmtTable{byClient: map[uint32]*preparedStmt{}} }

// sentPrepare records the SQL of a COM_STMT_PREPARE on its way to the owner.
func (s *stmtTable) sentPrepare(sql []byte) {
	s.mu.Lock()
	s.pending = append(s.pending, append([]byte(nil), sql...))
	s.mu.Unlock()
}

// answered is fed the first packet of a prepare's answer: an OK gets the client's id written
// over the owner's (in place); an error only ends the wait.
func (s *stmtTable) answered(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return
	}
	sql := s.pending[0]
	s.pending = s.pending[1:]
	if len(p) < 9 || p[0] != 0x00 {
		return
	}
	s.next++
	id := s.next
	s.byClient[id] = &preparedStmt{sql: sql, params: int(binary.LittleEndian.Uint16(p[7:])),
		owner: binary.LittleEndian.Uint32(p[1:]), typesOnOwner: false}
	binary.LittleEndian.PutUint32(p[1:], id)
}

// stmtCommand returns the command as the owner must see it: the owner's statement id and, for
// the first execute on a new owner, the parameter types.
func (cn *clientConn) stmtCommand(body []byte) []byte {
	if len(body) < 5 {
		return body
	}
	s := cn.t.stmts
	s.mu.Lock()
	defer s.mu.Unlock()
	id := binary.LittleEndian.Uint32(body[1:])
	st := s.byClient[id]
	if st == nil {
		return body // unknown to the router: the owner answers as it would
	}
	out := append([]byte(nil), body...)
	binary.LittleEndian.PutUint32(out[1:], st.owner)
	switch body[0] {
	case comStmtClose:
		delete(s.byClient, id)
	case comStmtSendLong:
		cn.t.longData.Store(true)
	case comStmtReset:
		cn.t.longData.Store(false)
	case comStmtExecute:
		cn.t.longData.Store(false)
		if len(out) >= 10 && out[5]&0x0f != 0 {
			cn.t.sess.pin("a server-side cursor")
		}
		if st.params == 0 {
			break
		}
		flag := 10 + (st.params+7)/8 // the new-parameters-bound flag
		if flag >= len(out) {
			break
		}
		if out[flag] == 1 {
			if flag+1+2*st.params <= len(out) {
				st.types = append(st.types[:0], out[flag+1:flag+1+2*st.params]...)
			}
			st.typesOnOwner = true
		} else if !st.typesOnOwner && st.types != nil {
			with := make([]byte, 0, len(out)+len(st.types))
			with = append(append(append(with, out[:flag]...), 1), st.types...)
			out = append(with, out[flag+1:]...)
			st.typesOnOwner = true
		}
	}
	return out
}

// reprepare prepares every open statement on a new owner connection and maps the ids to it. The
// prepares are sent all at once and their answers read in order: one round trip, not one each.
func (s *stmtTable) reprepare(c net.Conn, r *bufio.Reader, deprecateEOF bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byClient) == 0 {
		return nil
	}
	order := make([]*preparedStmt, 0, len(s.byClient))
	w := bufio.NewWriterSize(c, 16<<10)
	for _, st := range s.byClient {
		order = append(order, st)
		if err := writePacket(w, 0, append([]byte{comStmtPrepare}, st.sql...)); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	var failed error
	for _, st := range order {
		owner, err := readPrepared(r, deprecateEOF)
		if err != nil {
			if !errors.Is(err, errRefused) {
				return err // the connection is unusable
			}
			if failed == nil {
				failed = fmt.Errorf("%q: %w", truncate(st.sql, 60), err)
			}
			continue // read the other answers; the move fails below
		}
		st.owner, st.typesOnOwner = owner, false
	}
	return failed
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

var errRefused = errors.New("owner refused to prepare it again")

// readPrepared reads one prepare's whole answer; the owner's statement id.
func readPrepared(r *bufio.Reader, deprecateEOF bool) (uint32, error) {
	_, p, err := readPacket(r)
	if err != nil {
		return 0, err
	}
	if len(p) < 9 || p[0] != 0x00 {
		return 0, fmt.Errorf("%w: %s", errRefused, errText(p))
	}
	id := binary.LittleEndian.Uint32(p[1:])
	cols, params := int(binary.LittleEndian.Uint16(p[5:])), int(binary.LittleEndian.Uint16(p[7:]))
	for _, n := range []int{params, cols} {
		if n == 0 {
			continue
		}
		if !deprecateEOF {
			n++
		}
		for i := 0; i < n; i++ {
			if _, _, err := readPacket(r); err != nil {
				return 0, err
			}
		}
	}
	return id, nil
}
