package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func op(client int, in Input, call int64, out Output, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func linearizable(h []porcupine.Operation, allowEvicted bool) bool {
	return porcupine.CheckOperations(kvModel(allowEvicted), h)
}

// Shorthands for one cas key "k" and one counter key "n".
func set(v string) Input         { return Input{Key: "k", Op: "set", Value: v} }
func get() Input                 { return Input{Key: "k", Op: "get"} }
func gets() Input                { return Input{Key: "k", Op: "gets"} }
func del() Input                 { return Input{Key: "k", Op: "delete"} }
func cas(v, expect string) Input { return Input{Key: "k", Op: "cas", Value: v, Expect: expect} }
func nset(v string) Input        { return Input{Key: "n", Op: "set", Value: v, Counter: true} }
func nget() Input                { return Input{Key: "n", Op: "get", Counter: true} }
func incr() Input                { return Input{Key: "n", Op: "incr", Counter: true} }

var (
	stored   = Output{Kind: "stored"}
	miss     = Output{Kind: "miss"}
	deleted  = Output{Kind: "deleted"}
	notFound = Output{Kind: "notfound"}
	exists   = Output{Kind: "exists"}
)

func value(v string) Output  { return Output{Kind: "value", Value: v} }
func number(v string) Output { return Output{Kind: "number", Value: v} }

func TestLinearizableHistoryPasses(t *testing.T) {
	h := []porcupine.Operation{
		op(1, get(), 0, miss, 4),
		op(0, set("a"), 2, stored, 10),
		op(1, get(), 5, value("a"), 15), // overlaps the set: may see it
		op(2, get(), 6, miss, 12),       // overlaps the set: may not
		op(0, set("b"), 20, stored, 30),
		op(2, get(), 21, value("a"), 25), // concurrent with set b
		op(1, get(), 22, value("b"), 28), // concurrent with set b
		op(0, del(), 31, deleted, 40),
		op(1, get(), 41, miss, 50),
		op(2, del(), 42, notFound, 45),
	}
	if !linearizable(h, false) {
		t.Fatal("a linearizable history was rejected")
	}
}

func TestStaleReadAfterCompletedSetFails(t *testing.T) {
	h := []porcupine.Operation{
		op(0, set("a"), 0, stored, 10),
		op(0, set("b"), 11, stored, 20),
		op(1, get(), 21, value("a"), 30),
	}
	if linearizable(h, false) || linearizable(h, true) {
		t.Fatal("a stale read was accepted")
	}
}

func TestStaleReadAfterNewerReadFails(t *testing.T) {
	// Set b is concurrent with both reads, but once one read saw b, a later one may not see a.
	h := []porcupine.Operation{
		op(0, set("a"), 0, stored, 10),
		op(0, set("b"), 11, stored, 100),
		op(1, get(), 20, value("b"), 30),
		op(2, get(), 40, value("a"), 50),
	}
	if linearizable(h, false) || linearizable(h, true) {
		t.Fatal("a read going back in time was accepted")
	}
}

func TestReadAfterCompletedDeleteFails(t *testing.T) {
	h := []porcupine.Operation{
		op(0, set("a"), 0, stored, 10),
		op(0, del(), 11, deleted, 20),
		op(1, get(), 21, value("a"), 30),
	}
	if linearizable(h, false) || linearizable(h, true) {
		t.Fatal("a read of a deleted value was accepted")
	}
}

func TestValueNeverWrittenFails(t *testing.T) {
	h := []porcupine.Operation{op(0, get(), 0, value("zz"), 1)}
	if linearizable(h, true) {
		t.Fatal("a value nobody wrote was accepted")
	}
}

func TestMissFailsUnlessEvictionsAllowed(t *testing.T) {
	h := []porcupine.Operation{
		op(0, set("a"), 0, stored, 10),
		op(1, get(), 11, miss, 20),
		op(1, del(), 21, notFound, 30),
	}
	if linearizable(h, false) {
		t.Fatal("a lost write was accepted without -allow-evicted")
	}
	if !linearizable(h, true) {
		t.Fatal("an eviction was rejected with -allow-evicted")
	}
	// An eviction does not explain a value coming back.
	h = append(h, op(1, get(), 31, value("a"), 40))
	if linearizable(h, true) {
		t.Fatal("a value read back after its eviction was accepted")
	}
}

func TestCas(t *testing.T) {
	good := []porcupine.Operation{
		op(0, set("x1"), 0, stored, 1),
		op(0, gets(), 2, value("x1"), 3),
		op(1, gets(), 2, value("x1"), 3),
		op(0, cas("x2", "x1"), 4, stored, 5),
		op(1, cas("x3", "x1"), 4, exists, 6), // concurrent, loses
		op(1, del(), 7, deleted, 8),
		op(0, cas("x4", "x2"), 9, notFound, 10),
	}
	if !linearizable(good, false) {
		t.Fatal("a correct cas history was rejected")
	}
	bothWin := []porcupine.Operation{
		op(0, set("x1"), 0, stored, 1),
		op(0, cas("x2", "x1"), 2, stored, 5),
		op(1, cas("x3", "x1"), 3, stored, 6), // concurrent, but only one may win
	}
	if linearizable(bothWin, false) || linearizable(bothWin, true) {
		t.Fatal("two cas with one token both succeeding was accepted")
	}
	lostWrite := []porcupine.Operation{
		op(0, set("x1"), 0, stored, 1),
		op(1, set("x2"), 2, stored, 3),
		op(0, cas("x3", "x1"), 4, stored, 5), // the token is stale since set x2
	}
	if linearizable(lostWrite, false) || linearizable(lostWrite, true) {
		t.Fatal("a cas with a stale token succeeding was accepted")
	}
	spuriousExists := []porcupine.Operation{
		op(0, set("x1"), 0, stored, 1),
		op(0, cas("x2", "x1"), 2, exists, 3),
	}
	if linearizable(spuriousExists, false) {
		t.Fatal("EXISTS with no write since the gets was accepted")
	}
}

func TestIncr(t *testing.T) {
	good := []porcupine.Operation{
		op(0, incr(), 0, notFound, 1),
		op(0, nset("41"), 2, stored, 3),
		op(1, incr(), 4, number("42"), 6),
		op(2, incr(), 5, number("43"), 7),
		op(1, nget(), 8, value("43"), 9),
		op(1, nset("18446744073709551615"), 10, stored, 11),
		op(1, incr(), 12, number("0"), 13),
		op(2, nget(), 14, value("0                   "), 15), // memcached pads in place
	}
	if !linearizable(good, false) {
		t.Fatal("a correct incr history was rejected")
	}
	lost := []porcupine.Operation{
		op(0, nset("1"), 0, stored, 1),
		op(0, incr(), 2, number("2"), 5),
		op(1, incr(), 3, number("2"), 6),
	}
	if linearizable(lost, false) || linearizable(lost, true) {
		t.Fatal("a lost increment was accepted")
	}
}

func TestOutOfMemory(t *testing.T) {
	oom := Output{Kind: "oom"}
	// A failed set drops the old value.
	h := []porcupine.Operation{
		op(0, set("a"), 0, stored, 1),
		op(0, set("b"), 2, oom, 3),
		op(0, get(), 4, value("a"), 5),
	}
	if linearizable(h, false) {
		t.Fatal("the old value survived a failed set")
	}
	// A failed incr may keep it (memcached) or drop it (hkv).
	for _, after := range []Output{value("5"), miss} {
		h := []porcupine.Operation{
			op(0, nset("5"), 0, stored, 1),
			op(0, incr(), 2, oom, 3),
			op(0, nget(), 4, after, 5),
		}
		if !linearizable(h, false) {
			t.Fatalf("a failed incr followed by %v was rejected", after)
		}
	}
}

// TestCheckOutput runs check on a broken history and looks at what it prints.
func TestCheckOutput(t *testing.T) {
	h := []porcupine.Operation{
		op(0, set("a"), 0, stored, 10),
		op(0, del(), 11, deleted, 20),
		op(1, get(), 21, value("a"), 30),
		op(0, nset("1"), 0, stored, 10),
	}
	dir := t.TempDir()
	old := os.Stdout
	r, w, _ := os.Pipe()
	os.Stdout = w
	passed, failed := check(h, func(string) bool { return false }, 5*time.Second, dir)
	w.Close()
	os.Stdout = old
	var out strings.Builder
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
	}
	if passed != 1 || failed != 1 {
		t.Fatalf("passed %d failed %d, want 1 and 1:\n%s", passed, failed, out.String())
	}
	for _, want := range []string{"key k: VIOLATION\n", "key n: ok (1 ops)\n", `get -> "a"`} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "k.html")); err != nil {
		t.Fatalf("no visualization: %v", err)
	}
}

// With -watch-evictions a miss is excused only on the keys the server reported evicted.
func TestMissesAreExcusedOnlyForReportedEvictions(t *testing.T) {
	h := []porcupine.Operation{
		op(0, set("a"), 0, stored, 10),
		op(1, get(), 11, miss, 20),
		op(0, nset("1"), 0, stored, 10),
		op(1, nget(), 11, miss, 20),
	}
	old := os.Stdout
	os.Stdout, _ = os.Open(os.DevNull)
	defer func() { os.Stdout = old }()
	evicted := map[string]bool{"k": true}
	passed, failed := check(h, func(k string) bool { return evicted[k] }, 5*time.Second, "")
	if passed != 1 || failed != 1 {
		t.Fatalf("passed %d failed %d: want k excused and n a violation", passed, failed)
	}
}
