package main

// The owner-to-client direction, read packet by packet: which response each command gets and,
// from the status flags of its last packet, whether the connection is inside a transaction.
// That is all the router reads; rows, column definitions and values are forwarded unread.

import (
	"encoding/binary"
	"sync/atomic"
	"time"
)

const (
	comQuit            = 0x01
	comInitDB          = 0x02
	comQuery           = 0x03
	comFieldList       = 0x04
	comStatistics      = 0x09
	comChangeUser      = 0x11
	comStmtPrepare     = 0x16
	comStmtExecute     = 0x17
	comStmtSendLong    = 0x18
	comStmtClose       = 0x19
	comStmtFetch       = 0x1c
	statusMoreResults  = 0x0008
	statusCursorExists = 0x0040
)

// noResponse: commands the server never answers.
func noResponse(cmd byte) bool {
	return cmd == comQuit || cmd == comStmtSendLong || cmd == comStmtClose
}

type respState int

const (
	stFirst      respState = iota // the response's first packet
	stColumns                     // column definitions of a result set
	stColumnsEOF                  // the EOF after them (no CLIENT_DEPRECATE_EOF)
	stRows                        // rows until EOF/OK
	stPrepParams                  // a prepared statement's parameter definitions
	stPrepParamsEOF
	stPrepCols
	stPrepColsEOF
	stFieldList // COM_FIELD_LIST: definitions until EOF
	stInfile    // LOCAL INFILE: the client sends the file, then the server's OK/ERR
)

// tracker follows responses. It is fed every packet from the owner in order, and told of every
// command from the client (pending, in order: clients may pipeline).
type tracker struct {
	deprecateEOF bool
	pending      chan pendingCmd // commands awaiting a response, in order
	cmd          byte
	cmdAt        int64 // when the command in answer arrived (UnixNano)
	busy         bool  // inside a response
	state        respState
	left         int // definitions left in this state
	prepCols     int
	continuing   bool // the previous packet was 16 MiB - 1: this one continues it

	sess       sessionState
	okPkt      bool        // the last packet fed was an OK packet (it carries status and the session tracker)
	inTrans    atomic.Bool // SERVER_STATUS_IN_TRANS of the last status seen (see failed for errors)
	autocommit atomic.Bool // SERVER_STATUS_AUTOCOMMIT of the last status seen
	untracked  atomic.Bool // a command the tracker does not follow: never treat as between statements
	awaiting   atomic.Int32
	passing    atomic.Bool // a command is between the hold check and the owner (hold.go)
	longData   atomic.Bool // parameters sent with SEND_LONG_DATA wait for their execute on this owner
	stmts      *stmtTable
	lat        *latencyStats // the tenant's client-visible latency (nil: not measured)
	tx         txClock
}

type pendingCmd struct {
	cmd byte
	at  int64
}

func newTracker(deprecateEOF bool) *tracker {
	t := &tracker{deprecateEOF: deprecateEOF, pending: make(chan pendingCmd, 1024), stmts: newStmtTable()}
	t.autocommit.Store(true) // the server's default; the login's OK says for sure
	return t
}

// sent is called for every command the client sends (a packet with sequence 0).
func (t *tracker) sent(cmd byte) {
	if noResponse(cmd) {
		return
	}
	switch cmd {
	case comChangeUser:
		t.untracked.Store(true)
	}
	at := nowNs()
	if isStatement(cmd) && t.awaiting.Load() == 0 && !t.inTrans.Load() {
		t.tx.start.CompareAndSwap(0, at) // a transaction's first statement (or an autocommit one)
	}
	t.awaiting.Add(1)
	select {
	case t.pending <- pendingCmd{cmd, at}:
	default: // more than 1024 commands in flight: stop tracking rather than block
		t.untracked.Store(true)
	}
}

// idle: no response outstanding and outside a transaction: a statement boundary.
func (t *tracker) idle() bool {
	return t.awaiting.Load() == 0 && !t.inTrans.Load() && !t.untracked.Load() && !t.longData.Load()
}

func (t *tracker) status(flags uint16) {
	t.inTrans.Store(flags&statusInTrans != 0)
	t.autocommit.Store(flags&statusAutocommit != 0)
}

// failed is fed an ERR packet, which carries no status flags. A statement that fails rolls back
// itself only, so the transaction state stays what it was — except a deadlock (1213), which rolls
// the whole transaction back, and a failure with autocommit off outside a transaction, which may
// have begun one: unknown until the next status, counted as inside one.
func (t *tracker) failed(p []byte) {
	switch {
	case len(p) >= 3 && binary.LittleEndian.Uint16(p[1:]) == 1213:
		t.inTrans.Store(false)
	case !t.autocommit.Load():
		t.inTrans.Store(true)
	}
}

// okStatus reads the status flags of an OK packet (0x00 or, as a terminator, 0xfe).
func okStatus(p []byte) (uint16, bool) {
	_, pos, err := readLenenc(p, 1)
	if err != nil {
		return 0, false
	}
	if _, pos, err = readLenenc(p, pos); err != nil || pos+2 > len(p) {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[pos:]), true
}

// eofStatus reads the status flags of an EOF packet or, with CLIENT_DEPRECATE_EOF, the OK that
// replaces it.
func (t *tracker) eofStatus(p []byte) uint16 {
	if t.deprecateEOF || len(p) > 5 {
		if s, ok := okStatus(p); ok {
			return s
		}
	}
	if len(p) >= 5 {
		return binary.LittleEndian.Uint16(p[3:])
	}
	return statusInTrans // unknown: assume the worst
}

func (t *tracker) isTerminator(p []byte, n int) bool {
	return len(p) > 0 && p[0] == 0xfe && n < maxPacketPayload
}

// end closes a response; more results follow when the status says so.
func (t *tracker) end(flags uint16, haveFlags bool) {
	if haveFlags {
		t.status(flags)
		if flags&statusMoreResults != 0 {
			t.state = stFirst
			return
		}
	}
	t.busy = false
	left := t.awaiting.Add(-1)
	if t.lat != nil && isStatement(t.cmd) {
		now := nowNs()
		t.lat.statements.observe(time.Duration(now - t.cmdAt))
		if left == 0 && !t.inTrans.Load() {
			if start := t.tx.start.Swap(0); start != 0 {
				t.lat.transactions.observe(time.Duration(now - start))
			}
		}
	}
}

// packet is fed each packet from the owner: its declared length and (at least) its first bytes.
func (t *tracker) packet(p []byte, n int) {
	t.okPkt = false
	if t.continuing { // the rest of a packet of 16 MiB - 1: nothing to read in it
		t.continuing = n == maxPacketPayload
		return
	}
	t.continuing = n == maxPacketPayload
	if !t.busy {
		select {
		case pc := <-t.pending:
			t.cmd, t.cmdAt = pc.cmd, pc.at
		default: // a packet nobody asked for (the server closing with an error): nothing to track
			if len(p) > 0 && p[0] == 0xff {
				return
			}
			t.untracked.Store(true)
			return
		}
		t.busy, t.state = true, stFirst
	}
	switch t.state {
	case stFirst:
		t.first(p, n)
	case stColumns, stFieldList, stPrepParams, stPrepCols:
		if t.state == stFieldList {
			if len(p) > 0 && (p[0] == 0xff || t.isTerminator(p, n)) {
				t.end(0, false)
			}
			return
		}
		t.left--
		if t.left > 0 {
			return
		}
		switch t.state {
		case stColumns:
			if t.deprecateEOF {
				t.state = stRows
			} else {
				t.state = stColumnsEOF
			}
		case stPrepParams:
			if t.deprecateEOF {
				t.afterParams()
			} else {
				t.state = stPrepParamsEOF
			}
		case stPrepCols:
			if t.deprecateEOF {
				t.end(0, false)
			} else {
				t.state = stPrepColsEOF
			}
		}
	case stColumnsEOF:
		flags := t.eofStatus(p)
		if flags&statusCursorExists != 0 { // a cursor: rows come with COM_STMT_FETCH
			t.end(flags, true)
			return
		}
		t.state = stRows
	case stPrepParamsEOF:
		t.afterParams()
	case stPrepColsEOF:
		t.end(0, false)
	case stRows:
		t.row(p, n)
	case stInfile:
		t.first(p, n)
	}
}

func (t *tracker) row(p []byte, n int) {
	if len(p) > 0 && p[0] == 0xff {
		t.failed(p) // an error mid-result
		t.end(0, false)
	} else if t.isTerminator(p, n) {
		t.okPkt = t.deprecateEOF
		t.end(t.eofStatus(p), true)
	}
}

func (t *tracker) afterParams() {
	if t.prepCols > 0 {
		t.state, t.left = stPrepCols, t.prepCols
	} else {
		t.end(0, false)
	}
}

func (t *tracker) first(p []byte, n int) {
	if len(p) == 0 {
		t.untracked.Store(true)
		t.end(0, false)
		return
	}
	if t.cmd == comStmtPrepare {
		t.stmts.answered(p) // the client's statement id in place of the owner's (stmt.go)
	}
	switch {
	case p[0] == 0xff:
		t.failed(p)
		t.end(0, false)
	case t.cmd == comStatistics:
		t.end(0, false) // one string packet
	case t.cmd == comStmtPrepare && p[0] == 0x00 && len(p) >= 9:
		cols := int(binary.LittleEndian.Uint16(p[5:]))
		params := int(binary.LittleEndian.Uint16(p[7:]))
		t.prepCols = cols
		if params > 0 {
			t.state, t.left = stPrepParams, params
		} else {
			t.afterParams()
		}
	case p[0] == 0x00:
		t.okPkt = true
		if s, ok := okStatus(p); ok {
			t.end(s, true)
		} else {
			t.end(0, false)
		}
	case p[0] == 0xfe && n < 9 && t.cmd != comQuery && t.cmd != comStmtExecute:
		t.end(t.eofStatus(p), true) // EOF as the whole answer (COM_SET_OPTION, old servers)
	case p[0] == 0xfb && t.cmd == comQuery:
		t.state = stInfile
	case t.cmd == comFieldList:
		t.state = stFieldList
		if t.isTerminator(p, n) {
			t.end(0, false)
		}
	case t.cmd == comQuery || t.cmd == comStmtExecute || t.cmd == comStmtFetch:
		if t.cmd == comStmtFetch { // rows straight away
			t.state = stRows
			t.row(p, n)
			return
		}
		cols, _, err := readLenenc(p, 0)
		if err != nil || cols == 0 {
			t.untracked.Store(true)
			t.end(0, false)
			return
		}
		t.state, t.left = stColumns, int(cols)
	default:
		t.untracked.Store(true)
		t.end(0, false)
	}
}
