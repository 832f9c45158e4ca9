package main

// Moving an open connection to a tenant's new owner between statements.
//
// The owner side of every connection asks the server to report session changes (the session
// tracker: current database, every system variable set, and a flag for any other change). The
// router keeps the database and the variables; a change it cannot carry (user variables,
// temporary tables, SQL-level PREPARE, locks; binary prepared statements, which it does not map
// yet) pins the connection to its owner. When the route changes, an unpinned connection that is
// between statements and outside a transaction logs in to the new owner before its next command,
// with the same database and variables; a pinned one, or one inside a transaction, stays and ends
// when its owner ends.

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

const (
	statusStateChanged = 0x4000
	trackSysvars       = 0
	trackSchema        = 1
	trackStateChange   = 2
	// Sent on every owner connection right after the login.
	enableTracking = "SET SESSION session_track_schema=ON, session_track_state_change=ON, " +
		"session_track_system_variables='*'"
)

// sessionState is what the router knows of a connection's session.
type sessionState struct {
	clientTrack bool // the client asked for session tracking itself: forward OK packets as they are
	db          string
	sysvars     map[string]string
	pinned      atomic.Bool
	pinReason   atomic.Value
}

func (s *sessionState) pin(reason string) {
	if !s.pinned.Load() {
		s.pinReason.Store(reason)
		s.pinned.Store(true)
	}
}

// okSession reads the session tracker from an OK packet of a connection that negotiated
// CLIENT_SESSION_TRACK with its owner, updates the state, and returns the packet as the client
// expects it (without the tracker when the client did not ask for it).
func (s *sessionState) okSession(p []byte) []byte {
	_, pos, err := readLenenc(p, 1)
	if err != nil {
		return p
	}
	if _, pos, err = readLenenc(p, pos); err != nil || pos+4 > len(p) {
		return p
	}
	status := uint16(p[pos]) | uint16(p[pos+1])<<8
	pos += 4
	prefix := pos
	var info []byte
	if pos < len(p) {
		var n uint64
		if n, pos, err = readLenenc(p, pos); err != nil || pos+int(n) > len(p) {
			return p
		}
		info = p[pos : pos+int(n)]
		pos += int(n)
	}
	if status&statusStateChanged != 0 && pos < len(p) {
		s.readTrackers(p[pos:])
	}
	if s.clientTrack {
		return p
	}
	out := make([]byte, 0, prefix+len(info))
	out = append(out, p[:prefix]...)
	out[prefix-4] &^= byte(statusStateChanged & 0xff)
	out[prefix-3] &^= byte(statusStateChanged >> 8)
	return append(out, info...)
}

func (s *sessionState) readTrackers(b []byte) {
	total, pos, err := readLenenc(b, 0)
	if err != nil || pos+int(total) > len(b) {
		s.pin("unreadable session tracker")
		return
	}
	b = b[pos : pos+int(total)]
	known, changed := false, false
	for i := 0; i < len(b); {
		typ := b[i]
		n, j, err := readLenenc(b, i+1)
		if err != nil || j+int(n) > len(b) {
			s.pin("unreadable session tracker")
			return
		}
		data := b[j : j+int(n)]
		i = j + int(n)
		switch typ {
		case trackSysvars:
			name, k, err1 := readLenencStr(data, 0)
			val, _, err2 := readLenencStr(data, k)
			if err1 == nil && err2 == nil {
				if s.sysvars == nil {
					s.sysvars = map[string]string{}
				}
				s.sysvars[name] = val
				known = true
			}
		case trackSchema:
			if db, _, err := readLenencStr(data, 0); err == nil {
				s.db = db
				known = true
			}
		case trackStateChange:
			changed = true
		}
	}
	if changed && !known {
		// Something else changed: a user variable, a temporary table, a PREPARE, a lock...
		s.pin("session state the router cannot carry (user variable, temporary table, PREPARE, lock)")
	}
}

func readLenencStr(b []byte, pos int) (string, int, error) {
	n, pos, err := readLenenc(b, pos)
	if err != nil || pos+int(n) > len(b) {
		return "", pos, errProtocol
	}
	return string(b[pos : pos+int(n)]), pos + int(n), nil
}

// Statements that create state the tracker may not flag: pin before they run.
var pinWords = [][]byte{[]byte("GET_LOCK"), []byte("LOCK TABLE"), []byte("TEMPORARY"), []byte("PREPARE"),
	[]byte("XA "), []byte("SQL_CALC_FOUND_ROWS")}

// userVariable: an '@' that is not part of '@@' (a system variable).
func userVariable(q []byte) bool {
	for i := bytes.IndexByte(q, '@'); i >= 0 && i < len(q); {
		if (i+1 >= len(q) || q[i+1] != '@') && (i == 0 || q[i-1] != '@') {
			return true
		}
		if i+2 > len(q) {
			return false
		}
		j := bytes.IndexByte(q[i+2:], '@')
		if j < 0 {
			return false
		}
		i += 2 + j
	}
	return false
}

// checkCommand pins the session for commands whose effect cannot be carried to another owner.
func (s *sessionState) checkCommand(body []byte) {
	if len(body) == 0 || s.pinned.Load() {
		return
	}
	switch body[0] {
	case comChangeUser:
		s.pin("COM_CHANGE_USER")
	case comQuery, comStmtPrepare:
		q := body[1:]
		if len(q) > 4096 {
			q = q[:4096]
		}
		if userVariable(q) {
			s.pin("a user variable")
			return
		}
		up := bytes.ToUpper(q)
		for _, w := range pinWords {
			if bytes.Contains(up, w) {
				s.pin("a statement with " + strings.TrimSpace(string(w)))
				return
			}
		}
	}
}

// Variables the tracker reports that a session cannot set (the server changes them itself).
var readOnlyVars = map[string]bool{"last_gtid": true}

// replay returns one assignment per session variable the client changed.
func (s *sessionState) replay() []string {
	names := make([]string, 0, len(s.sysvars))
	for n := range s.sysvars {
		if !readOnlyVars[n] && !strings.ContainsAny(n, "`'\\ ") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		v := strings.ReplaceAll(strings.ReplaceAll(s.sysvars[n], "\\", "\\\\"), "'", "''")
		parts = append(parts, fmt.Sprintf("`%s`='%s'", n, v))
	}
	return parts
}

// restore sets the variables on a new owner connection: all in one statement, or, if the owner
// refuses that, one at a time, skipping those it says are read-only (error 1238).
func (s *sessionState) restore(c net.Conn, r *bufio.Reader) error {
	parts := s.replay()
	if len(parts) == 0 {
		return nil
	}
	if simpleQuery(c, r, "SET SESSION "+strings.Join(parts, ", ")) == nil {
		return nil
	}
	for _, p := range parts {
		if err := simpleQuery(c, r, "SET SESSION "+p); err != nil && !strings.Contains(err.Error(), "read only") &&
			!strings.Contains(err.Error(), "1238") {
			return err
		}
	}
	return nil
}

// simpleQuery runs one statement on a fresh owner connection and checks it answered OK.
func simpleQuery(s net.Conn, sr *bufio.Reader, sql string) error {
	if err := writePacket(s, 0, append([]byte{comQuery}, sql...)); err != nil {
		return err
	}
	_, p, err := readPacket(sr)
	if err != nil {
		return err
	}
	if len(p) == 0 || p[0] != 0x00 {
		return fmt.Errorf("owner refused %q: %s", strings.Join(strings.SplitN(sql, " ", 4)[:3], " "), errText(p))
	}
	return nil
}

// waitNewerRoute waits (bounded) for the tenant's route to move past `epoch`.
func (rt *Router) waitNewerRoute(tenant string, epoch int64, within time.Duration) *route {
	deadline := time.Now().Add(within)
	for {
		if r, _ := rt.lookup(tenant); r != nil && r.Epoch > epoch {
			return r
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}
