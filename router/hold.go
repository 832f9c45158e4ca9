package main

// The router's part of a handover (POST /hold and /release on the admin address, which need a
// bearer derived from the credential this router holds: the control side hands it over on stdin).
//
// Before the source is frozen the handover asks every router to hold the tenant: a connection of
// that tenant that is between statements outside a transaction waits before its next command,
// and a connection inside a transaction, or with a response outstanding, goes on until it is
// between statements again (it drains). The hold answers once every connection of the tenant is
// drained or held, or when the drain bound is up (then it says how many are still busy), so the
// freeze meets no statement of a routed client. After the flip the handover releases the hold
// with the new owner: the held commands move there (move.go). If the handover gives up, the
// release names no owner and the held commands go on to the source. A hold that is never released
// ends by itself at its deadline: a handover that died cannot stall clients for longer than that.

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// holdState is one hold of one tenant.
type holdState struct {
	until    time.Time
	released chan struct{}
	waiting  atomic.Int64 // commands waiting now
	held     atomic.Int64 // commands that waited in this hold
}

// holdStats are kept per tenant (tenantStats.hold* fields).
type holdStats struct {
	hold                                                         atomic.Pointer[holdState]
	holds, heldCommands, holdExpired, drainTimeouts, lastMaxWait atomic.Int64
	moveMax                                                      atomic.Int64 // longest move (login, variables, statements) since the last hold, ns
	holdStart, holdEnd                                           atomic.Int64 // the last hold's start and end, Unix ns
}

func (s *holdStats) noteMove(d time.Duration) {
	for {
		m := s.moveMax.Load()
		if int64(d) <= m || s.moveMax.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// waitHold waits, before a command, while the connection's tenant is held and the connection is
// between statements outside a transaction. A connection inside a transaction drains: it goes on.
// The caller has set t.passing: a hold that begins after this check sees the command as busy
// until it is answered; while it waits here the connection counts as drained.
func (cn *clientConn) waitHold() {
	for {
		h := cn.st.hold.Load()
		if h == nil || !cn.t.idle() {
			return
		}
		cn.t.passing.Store(false)
		cn.waitOne(h)
		cn.t.passing.Store(true) // a hold that began meanwhile is seen on the next turn
	}
}

func (cn *clientConn) waitOne(h *holdState) {
	t0 := time.Now()
	h.waiting.Add(1)
	timer := time.NewTimer(time.Until(h.until))
	select {
	case <-h.released:
	case <-timer.C:
		if cn.st.hold.CompareAndSwap(h, nil) {
			cn.st.holdEnd.Store(time.Now().UnixNano())
			cn.st.holdExpired.Add(1)
			log.Printf("tenant %s: hold not released within its deadline: commands go on", cn.tenant)
			close(h.released)
		}
	}
	timer.Stop()
	h.waiting.Add(-1)
	h.held.Add(1)
	cn.st.heldCommands.Add(1)
	w := int64(time.Since(t0))
	for {
		m := cn.st.lastMaxWait.Load()
		if w <= m || cn.st.lastMaxWait.CompareAndSwap(m, w) {
			break
		}
	}
}

// busy counts the tenant's connections that are not drained: inside a transaction, with a
// response outstanding, or passing the hold check right now.
func (s *tenantStats) busy() (busy, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.conns {
		total++
		if t.passing.Load() || t.awaiting.Load() > 0 || t.inTrans.Load() || t.untracked.Load() || t.longData.Load() {
			busy++
		}
	}
	return
}

func (rt *Router) authorized(w http.ResponseWriter, r *http.Request) bool {
	tok, _ := rt.token.Load().(string)
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return false
	}
	if tok == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+tok)) != 1 {
		http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
		return false
	}
	return true
}

func msParam(r *http.Request, name string, def, max time.Duration) time.Duration {
	v, err := strconv.ParseFloat(r.URL.Query().Get(name), 64)
	if err != nil || v < 0 {
		return def
	}
	d := time.Duration(v * float64(time.Millisecond))
	if d > max {
		d = max
	}
	return d
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// serveHold: POST /hold?tenant=T&drain_ms=D&hold_ms=H. Holds the tenant for at most H ms and
// answers when its connections are drained, or after D ms with how many are still busy.
func (rt *Router) serveHold(w http.ResponseWriter, r *http.Request) {
	if !rt.authorized(w, r) {
		return
	}
	tenant := r.URL.Query().Get("tenant")
	_, st := rt.lookup(tenant)
	if st == nil {
		writeJSON(w, http.StatusOK, map[string]any{"tenant": tenant, "held": false, "drained": true, "busy": 0,
			"connections": 0})
		return
	}
	drain := msParam(r, "drain_ms", time.Second, time.Minute)
	holdFor := msParam(r, "hold_ms", 5*time.Second, 10*time.Minute)
	t0 := time.Now()
	h := &holdState{until: t0.Add(holdFor), released: make(chan struct{})}
	if old := st.hold.Swap(h); old != nil {
		close(old.released) // a new handover replaces a stale hold: its waiters wait on the new one next
	}
	st.holds.Add(1)
	st.lastMaxWait.Store(0)
	st.moveMax.Store(0)
	st.holdStart.Store(t0.UnixNano())
	st.holdEnd.Store(0)
	busy, total := st.busy()
	for busy > 0 && time.Since(t0) < drain {
		time.Sleep(500 * time.Microsecond)
		busy, total = st.busy()
	}
	if busy > 0 {
		st.drainTimeouts.Add(1)
		log.Printf("tenant %s: hold: %d of %d connections still inside a transaction or a statement after %v",
			tenant, busy, total, drain)
	} else {
		log.Printf("tenant %s: hold: %d connections drained in %v", tenant, total, time.Since(t0).Round(time.Microsecond))
	}
	writeJSON(w, http.StatusOK, map[string]any{"tenant": tenant, "held": true, "drained": busy == 0, "busy": busy,
		"connections": total, "waited_ms": float64(time.Since(t0).Microseconds()) / 1000})
}

// serveRelease: POST /release?tenant=T[&epoch=E&node=N&host=H&port=P[&owner_user=U&database=D]]. With an owner newer than
// the route in use it is applied first (the directory's watch brings the same one a moment later),
// so the held commands go to the new owner; without one they go on to the one they had.
func (rt *Router) serveRelease(w http.ResponseWriter, r *http.Request) {
	if !rt.authorized(w, r) {
		return
	}
	q := r.URL.Query()
	tenant := q.Get("tenant")
	old, st := rt.lookup(tenant)
	if st == nil {
		writeJSON(w, http.StatusOK, map[string]any{"tenant": tenant, "released": false})
		return
	}
	if e, err := strconv.ParseInt(q.Get("epoch"), 10, 64); err == nil && old != nil && e > old.Epoch {
		port, err := strconv.Atoi(q.Get("port"))
		if err != nil || q.Get("host") == "" {
			http.Error(w, "a new owner needs host and port", http.StatusBadRequest)
			return
		}
		ownerUser, database := old.OwnerUser, old.Database
		if q.Has("owner_user") { // the new owner's accounts: a move may change the tenant's kind
			ownerUser, database = q.Get("owner_user"), q.Get("database")
		}
		m := controlMsg{route: route{Tenant: tenant, Node: q.Get("node"), Host: q.Get("host"), Port: port, Epoch: e,
			User: old.User, OwnerUser: ownerUser, Database: database, ChangedAt: float64(time.Now().UnixNano()) / 1e9}, Op: "route",
			Hash: fmt.Sprintf("%x", old.stage2), UpdatedAt: float64(time.Now().UnixNano()) / 1e9}
		if err := rt.apply(m); err != nil {
			log.Printf("release %s: %v", tenant, err)
		}
	}
	h := st.hold.Swap(nil)
	doc := map[string]any{"tenant": tenant, "released": h != nil}
	if h != nil {
		st.holdEnd.Store(time.Now().UnixNano())
		log.Printf("tenant %s: hold released (epoch %s) with %d commands waiting", tenant, q.Get("epoch"), h.waiting.Load())
		doc["waiting"] = h.waiting.Load()
		close(h.released)
		doc["held"] = h.held.Load()
	}
	writeJSON(w, http.StatusOK, doc)
}
