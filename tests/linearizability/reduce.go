package main

import (
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Porcupine's search visits every subset of the concurrent operations it could linearize at
// a point, so its cost grows steeply with the number of overlapping operations on a key.
// reduce drops operations that cannot change the verdict, before the check:
//
// A read-only operation r2 (a get or gets, a miss of any kind, a cas answered EXISTS) is
// redundant when another kept read-only operation r1 lies within r2's interval and every
// state in which r1 can take effect also lets r2 take effect, leaving the same state. Given
// any linearization of the history without r2, putting r2 right after r1 yields one of
// the history with it: r2 is legal there; every operation that must precede r2 (returned
// before r2's call, so before r1's call) precedes r1; every operation that must follow r2
// (called after r2's return, so after r1's return) follows r1, and nothing else moves.
// Conversely a linearization of the whole history restricted to the rest is one of the
// rest. So the verdict is unchanged; only the search gets smaller.
//
// "Leaving the same state" holds for every pair below: read-only operations leave the state
// as it is, and with -allow-evicted a miss empties the key, which a second miss leaves empty.

// effect classifies a read-only outcome by the states it accepts; ok is false for writes.
type effect struct {
	kind  string // value (the key holds v), miss (absent), exists (present, not v), any
	value string
}

func effectOf(in Input, o Output) (effect, bool) {
	switch o.Kind {
	case "value":
		v := o.Value
		if in.Counter {
			v = strings.TrimRight(v, " ")
		}
		return effect{"value", v}, true
	case "miss", "notfound":
		return effect{"miss", ""}, true
	case "exists":
		return effect{"exists", in.Expect}, true
	case "readerror":
		return effect{"any", ""}, true
	}
	return effect{}, false
}

// implies reports whether every state that accepts a also accepts b.
func implies(a, b effect) bool {
	if a == b || b.kind == "any" {
		return true
	}
	// A value v is present and differs from any other expected value. (An incr result on a
	// counter key is never compared with a cas token: cas keys take no incr.)
	return a.kind == "value" && b.kind == "exists" && a.value != b.value
}

// reduce returns the operations of one key's history that are not redundant, in their
// original order.
func reduce(h []porcupine.Operation) []porcupine.Operation {
	type ro struct {
		i int
		e effect
	}
	var reads []ro
	for i, op := range h {
		if e, ok := effectOf(op.Input.(Input), op.Output.(Output)); ok {
			reads = append(reads, ro{i, e})
		}
	}
	// Shortest first, so that each candidate is compared with the kept ones it may contain.
	sort.SliceStable(reads, func(a, b int) bool {
		x, y := h[reads[a].i], h[reads[b].i]
		return x.Return-x.Call < y.Return-y.Call
	})
	drop := make([]bool, len(h))
	var kept []ro
	for _, r2 := range reads {
		o2 := h[r2.i]
		for _, r1 := range kept {
			o1 := h[r1.i]
			if o2.Call <= o1.Call && o1.Return <= o2.Return && implies(r1.e, r2.e) {
				drop[r2.i] = true
				break
			}
		}
		if !drop[r2.i] {
			kept = append(kept, r2)
		}
	}
	out := make([]porcupine.Operation, 0, len(h))
	for i, op := range h {
		if !drop[i] {
			out = append(out, op)
		}
	}
	return out
}

// tighten narrows intervals where the history itself implies the order, which keeps the
// verdict and shrinks Porcupine's search. A value is "observed" by a get or gets that
// returns it, a cas that succeeds expecting it and an incr that returns it plus one; if
// exactly one operation ever stored it (a set, a successful cas, or an incr that returned
// it), every observer must be linearized after that writer. So
//   - an observer's call can be raised to the writer's call: whatever returned before the
//     writer was called precedes the writer, hence the observer, anyway;
//   - the writer's return can be lowered to the observer's return: whatever is called
//     after the observer returned follows the observer, hence the writer, anyway.
//
// Where the intervals contradict that (an observer that returned before its writer was
// called) nothing is changed: the history is not linearizable and Porcupine will say so.
func tighten(h []porcupine.Operation) []porcupine.Operation {
	h = append([]porcupine.Operation(nil), h...)
	writers := map[string][]int{}
	for i, op := range h {
		in, out := op.Input.(Input), op.Output.(Output)
		switch {
		case (in.Op == "set" || in.Op == "cas") && out.Kind == "stored":
			writers[in.Value] = append(writers[in.Value], i)
		case in.Op == "incr" && out.Kind == "number":
			writers[out.Value] = append(writers[out.Value], i)
		}
	}
	for pass := 0; pass < 100; pass++ { // to a fixpoint, along chains of increments
		changed := false
		for i := range h {
			in, out := h[i].Input.(Input), h[i].Output.(Output)
			var seen string
			switch {
			case out.Kind == "value":
				seen = out.Value
				if in.Counter {
					seen = strings.TrimRight(seen, " ")
				}
			case in.Op == "cas" && out.Kind == "stored":
				seen = in.Expect
			case in.Op == "incr" && out.Kind == "number":
				v, err := strconv.ParseUint(out.Value, 10, 64)
				if err != nil {
					continue
				}
				seen = strconv.FormatUint(v-1, 10)
			default:
				continue
			}
			w := writers[seen]
			if len(w) != 1 || w[0] == i {
				continue
			}
			wr := &h[w[0]]
			o := &h[i]
			if o.Return < wr.Call {
				continue
			}
			if o.Call < wr.Call {
				o.Call = wr.Call
				changed = true
			}
			if wr.Return > o.Return {
				wr.Return = o.Return
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	return h
}
