package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Input is one request on one key.
//
// Keys come in two kinds that are never mixed: counter keys take set (of a decimal
// number), get, delete and incr; cas keys take set, get, gets, delete and cas. On a cas key
// every write stores bytes no other write stores, so a value names the write that made it
// and "the item still holds the value my gets saw" means "no write since my gets", which is
// what a cas token stands for. (incr can produce the same number twice, which is why cas is
// never used on a counter key.)
type Input struct {
	Key     string
	Op      string // set get gets delete incr cas
	Value   string // set, cas: the bytes written
	Expect  string // cas: the value the client's last gets of the key returned with the token
	Token   string // cas: that token (for the report only; the model does not use it)
	Counter bool   // a counter key (its values are compared as numbers, see Output)
}

// Output is the server's answer, reduced to what the model needs.
type Output struct {
	Kind  string // stored exists notfound deleted value miss number nonnumeric oom readerror
	Value string // value (get, gets), number (incr)
}

// state is one key: absent, or present with a value.
type state struct {
	present bool
	value   string
}

var absent = state{}

// kvModel is memcached's semantics for one key.
//
// It is nondeterministic in one place only: a cas or incr answered "SERVER_ERROR out of
// memory" may leave the old value (memcached) or drop it (hkv, which retires the old version
// before allocating the new one). A set answered that way drops the old value on both (so
// stale data cannot outlive a failed set).
//
// With allowEvicted, any miss (get END, delete/incr/cas NOT_FOUND) is accepted at any moment
// as an eviction just before it: the key becomes absent. That is the model for runs under
// memory pressure, and it is weaker: a lost write shows up only as a miss and is no longer
// caught. What it still catches: stale values
// (a read of a value that was already overwritten), values that never were written,
// resurrection after a delete (a value read back after a completed delete with no write
// since), double-applied or lost incr, and two cas with one token both succeeding.
func kvModel(allowEvicted bool) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partitionByKey,
		Init:      func() []interface{} { return []interface{}{absent} },
		Step: func(st, in, out interface{}) []interface{} {
			return step(st.(state), in.(Input), out.(Output), allowEvicted)
		},
		Hash: func(st interface{}) uint64 {
			s := st.(state)
			h := uint64(14695981039346656037)
			if s.present {
				h ^= 1
			}
			for i := 0; i < len(s.value); i++ {
				h = (h ^ uint64(s.value[i])) * 1099511628211
			}
			return h
		},
		DescribeOperation: describeOperation,
		DescribeState:     func(st interface{}) string { return describeState(st.(state)) },
		DescribeOperationMetadata: func(m interface{}) string {
			if r, ok := m.(recorded); ok {
				return fmt.Sprintf("recorded interval [%d, %d] ns", r.call, r.ret)
			}
			return ""
		},
	}
	return nm.ToModel()
}

func partitionByKey(h []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range h {
		k := op.Input.(Input).Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

func states(ok bool, next ...state) []interface{} {
	if !ok {
		return nil
	}
	out := make([]interface{}, len(next))
	for i, s := range next {
		out[i] = s
	}
	return out
}

// sameValue compares a stored value with one read back. On counter keys the comparison is
// numeric up to trailing spaces: memcached rewrites an incremented number in place when it
// got shorter (a 64-bit wrap) and pads it with spaces.
func sameValue(counter bool, stored, read string) bool {
	if counter {
		return stored == strings.TrimRight(read, " ")
	}
	return stored == read
}

func step(s state, i Input, o Output, allowEvicted bool) []interface{} {
	// A miss: the key is absent, or (allowEvicted) was evicted just before.
	miss := func() []interface{} { return states(!s.present || allowEvicted, absent) }
	switch i.Op {
	case "set":
		switch o.Kind {
		case "stored":
			return states(true, state{true, i.Value})
		case "oom":
			return states(true, absent)
		}
	case "get", "gets":
		switch o.Kind {
		case "value":
			return states(s.present && sameValue(i.Counter, s.value, o.Value), s)
		case "miss":
			return miss()
		case "readerror":
			return states(true, s)
		}
	case "delete":
		switch o.Kind {
		case "deleted":
			return states(s.present, absent)
		case "notfound":
			return miss()
		}
	case "incr":
		switch o.Kind {
		case "number":
			v, err := strconv.ParseUint(strings.TrimRight(s.value, " "), 10, 64)
			if !s.present || err != nil {
				return nil
			}
			want := strconv.FormatUint(v+1, 10) // wraps at 2^64 as memcached does
			return states(o.Value == want, state{true, want})
		case "nonnumeric":
			_, err := strconv.ParseUint(strings.TrimRight(s.value, " "), 10, 64)
			return states(s.present && err != nil, s)
		case "notfound":
			return miss()
		case "oom":
			if !s.present {
				return nil
			}
			return states(true, s, absent)
		}
	case "cas":
		switch o.Kind {
		case "stored":
			return states(s.present && s.value == i.Expect, state{true, i.Value})
		case "exists":
			return states(s.present && s.value != i.Expect, s)
		case "notfound":
			return miss()
		case "oom":
			// memcached allocates before it compares tokens, so this can come in any state.
			return states(true, s, absent)
		}
	}
	return nil
}

func describeOperation(in, out interface{}) string {
	i, o := in.(Input), out.(Output)
	switch i.Op {
	case "set":
		return fmt.Sprintf("set %q -> %s", short(i.Value), o.Kind)
	case "cas":
		return fmt.Sprintf("cas %q if still %q (token %s) -> %s", short(i.Value), short(i.Expect), i.Token, o.Kind)
	case "get", "gets", "incr":
		if o.Kind == "value" || o.Kind == "number" {
			return fmt.Sprintf("%s -> %q", i.Op, short(o.Value))
		}
		return fmt.Sprintf("%s -> %s", i.Op, o.Kind)
	default:
		return fmt.Sprintf("%s -> %s", i.Op, o.Kind)
	}
}

func describeState(s state) string {
	if !s.present {
		return "absent"
	}
	return fmt.Sprintf("%q", short(s.value))
}

func short(s string) string {
	if len(s) > 28 {
		return s[:28] + "..."
	}
	return s
}
