package main

import (
	"math/rand"
	"sort"
	"strconv"
	"testing"

	"github.com/anishathalye/porcupine"
)

// randomHistory makes a small concurrent history on one key: random intervals, a random
// linearization point in each, answers computed by running the operations in that order
// (so the history is linearizable), then, half the time, one answer changed (so it may not
// be). Values are few, so that reads of equal numbers from different writes happen.
func randomHistory(rng *rand.Rand, counter bool) []porcupine.Operation {
	n := 3 + rng.Intn(8)
	type gen struct {
		op    porcupine.Operation
		point int64
	}
	ops := make([]gen, n)
	var written []string
	for i := range ops {
		call := int64(rng.Intn(40))
		ret := call + int64(rng.Intn(15))
		in := Input{Key: "k", Counter: counter}
		x := rng.Intn(100)
		switch {
		case x < 25:
			in.Op = "set"
			if counter {
				in.Value = strconv.Itoa(rng.Intn(4))
			} else {
				in.Value = "v" + strconv.Itoa(i)
			}
			written = append(written, in.Value)
		case x < 55:
			in.Op = "get"
		case x < 65:
			in.Op = "delete"
		case counter:
			in.Op = "incr"
		case x < 72:
			in.Op = "gets"
		default:
			in.Op = "cas"
			in.Value = "v" + strconv.Itoa(i)
			written = append(written, in.Value)
		}
		ops[i] = gen{porcupine.Operation{ClientId: i, Input: in, Call: call, Return: ret}, call + int64(rng.Intn(int(ret-call)+1))}
	}
	for i := range ops {
		if in := ops[i].op.Input.(Input); in.Op == "cas" && len(written) > 0 {
			in.Expect = written[rng.Intn(len(written))]
			ops[i].op.Input = in
		}
	}
	sort.Slice(ops, func(a, b int) bool { return ops[a].point < ops[b].point })
	s := state{}
	for i := range ops {
		in := ops[i].op.Input.(Input)
		var o Output
		switch in.Op {
		case "set":
			o, s = Output{Kind: "stored"}, state{true, in.Value}
		case "get", "gets":
			if s.present {
				o = Output{Kind: "value", Value: s.value}
			} else {
				o = Output{Kind: "miss"}
			}
		case "delete":
			if s.present {
				o = Output{Kind: "deleted"}
			} else {
				o = Output{Kind: "notfound"}
			}
			s = state{}
		case "incr":
			if s.present {
				v, _ := strconv.ParseUint(s.value, 10, 64)
				s.value = strconv.FormatUint(v+1, 10)
				o = Output{Kind: "number", Value: s.value}
			} else {
				o = Output{Kind: "notfound"}
			}
		case "cas":
			switch {
			case !s.present:
				o = Output{Kind: "notfound"}
			case s.value == in.Expect:
				o, s = Output{Kind: "stored"}, state{true, in.Value}
			default:
				o = Output{Kind: "exists"}
			}
		}
		ops[i].op.Output = o
	}
	if rng.Intn(2) == 0 {
		i := rng.Intn(n)
		in := ops[i].op.Input.(Input)
		pick := func() string {
			if len(written) == 0 || rng.Intn(4) == 0 {
				return strconv.Itoa(rng.Intn(6))
			}
			return written[rng.Intn(len(written))]
		}
		for j := range ops {
			// Prefer changing a cas answer: those are the subtle ones.
			if ops[j].op.Input.(Input).Op == "cas" && rng.Intn(2) == 0 {
				i, in = j, ops[j].op.Input.(Input)
				break
			}
		}
		switch in.Op {
		case "get", "gets":
			if rng.Intn(3) == 0 {
				ops[i].op.Output = Output{Kind: "miss"}
			} else {
				ops[i].op.Output = Output{Kind: "value", Value: pick()}
			}
		case "incr":
			ops[i].op.Output = Output{Kind: "number", Value: strconv.Itoa(rng.Intn(6))}
		case "cas":
			ops[i].op.Output = Output{Kind: []string{"stored", "exists", "notfound"}[rng.Intn(3)]}
		case "delete":
			ops[i].op.Output = Output{Kind: []string{"deleted", "notfound"}[rng.Intn(2)]}
		}
	}
	h := make([]porcupine.Operation, n)
	for i, g := range ops {
		h[i] = g.op
	}
	rng.Shuffle(n, func(a, b int) { h[a], h[b] = h[b], h[a] })
	return h
}

// TestReductionsKeepTheVerdict compares Porcupine's verdict on random histories with its
// verdict on what reduce and tighten make of them.
func TestReductionsKeepTheVerdict(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	counts := map[bool]int{}
	changed := 0
	for i := 0; i < 30000; i++ {
		counter := i%2 == 0
		evict := i%3 == 0
		h := randomHistory(rng, counter)
		model := kvModel(evict)
		want := porcupine.CheckOperations(model, h)
		r := reduce(tighten(h))
		if len(r) != len(h) || !sameIntervals(h, r) {
			changed++
		}
		if got := porcupine.CheckOperations(model, r); got != want {
			t.Fatalf("history %d (allow-evicted %v): verdict %v, after reduction %v\n%s\nreduced:\n%s",
				i, evict, want, got, dump(h), dump(r))
		}
		counts[want]++
	}
	t.Logf("%d linearizable, %d not; %d changed by the reductions", counts[true], counts[false], changed)
	if counts[true] < 1000 || counts[false] < 1000 || changed < 1000 {
		t.Fatal("the random histories do not exercise both verdicts and the reductions")
	}
}

func sameIntervals(a, b []porcupine.Operation) bool {
	for i := range a {
		if a[i].Call != b[i].Call || a[i].Return != b[i].Return {
			return false
		}
	}
	return true
}

func dump(h []porcupine.Operation) string {
	s := ""
	for _, op := range h {
		s += "  " + describe(kvModel(false), op) + "\n"
	}
	return s
}
