package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// clientConfig is what every client shares.
type clientConfig struct {
	addr      string
	prefix    string // keys are prefix + index
	keys      int
	ops       int
	pipeline  int
	valueSize int
	start     time.Time // the history's time origin
	deadline  time.Duration
}

// keyName is the name of hot key k. Even keys are counter keys, odd ones cas keys.
func (c *clientConfig) keyName(k int) string { return fmt.Sprintf("%s%d", c.prefix, k) }

type casSeen struct{ token, value string }

// dial opens a client's connection and makes one round trip on it (`version`), so that
// connection set-up does not fall inside the history.
func dial(addr string) (net.Conn, *bufio.Reader, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReaderSize(conn, 64<<10)
	if _, err := conn.Write([]byte("version\r\n")); err != nil {
		conn.Close()
		return nil, nil, err
	}
	if l, err := readLine(r); err != nil || !strings.HasPrefix(l, "VERSION ") {
		conn.Close()
		return nil, nil, fmt.Errorf("version: %q %v", l, err)
	}
	return conn, r, nil
}

// runClient runs one client over its own connection: it writes up to `pipeline` requests
// at once, then reads their replies. Each operation's invocation time is taken just
// before the write that carries it and its return time just after its reply was parsed.
func runClient(cfg *clientConfig, conn net.Conn, r *bufio.Reader, id int, seed int64) ([]porcupine.Operation, error) {
	_ = conn.SetDeadline(time.Now().Add(cfg.deadline))
	rng := rand.New(rand.NewSource(seed))
	seen := map[string]casSeen{} // cas key -> the token and value of the last gets that hit
	out := make([]porcupine.Operation, 0, cfg.ops)
	seq := 0
	var req []byte
	batch := make([]Input, 0, cfg.pipeline)
	for done := 0; done < cfg.ops; {
		req, batch = req[:0], batch[:0]
		for len(batch) < cfg.pipeline && done < cfg.ops {
			seq++
			in := nextOp(cfg, rng, id, seq, seen)
			req = appendRequest(req, in)
			batch = append(batch, in)
			done++
		}
		call := time.Since(cfg.start).Nanoseconds()
		if _, err := conn.Write(req); err != nil {
			return nil, err
		}
		for _, in := range batch {
			o, token, err := readReply(r, in)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", in.Op, in.Key, err)
			}
			ret := time.Since(cfg.start).Nanoseconds()
			if in.Op == "gets" && o.Kind == "value" {
				seen[in.Key] = casSeen{token, o.Value}
			}
			out = append(out, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: o, Return: ret})
		}
	}
	return out, nil
}

// nextOp picks a random request on a random hot key. The mix keeps every kind of request
// but leans on those whose answers pin down the order (gets of unique values, increments
// from far-apart starting points): Porcupine's search grows steeply with the number of
// concurrent operations whose answers many states would explain (misses, cas EXISTS).
//
//	counter keys: set 6% (1 in 20 near 2^64), get 44%, delete 3%, incr 47%
//	cas keys:     set 12%, get 35%, delete 3%, gets 25%, cas 25% (a gets when the
//	              client has no token for the key yet; a token is reused until the next gets)
func nextOp(cfg *clientConfig, rng *rand.Rand, id, seq int, seen map[string]casSeen) Input {
	k := rng.Intn(cfg.keys)
	in := Input{Key: cfg.keyName(k), Counter: k%2 == 0}
	x := rng.Intn(100)
	if in.Counter {
		switch {
		case x < 6:
			in.Op = "set"
			if rng.Intn(20) == 0 {
				// Near 2^64, so that increments wrap.
				in.Value = strconv.FormatUint(^uint64(0)-uint64(rng.Intn(3)), 10)
			} else {
				// Far apart, so that numbers reached by increments from different sets differ.
				in.Value = strconv.FormatUint(uint64(id+1)<<40|uint64(seq%(1<<20))<<20, 10)
			}
		case x < 50:
			in.Op = "get"
		case x < 53:
			in.Op = "delete"
		default:
			in.Op = "incr"
		}
		return in
	}
	switch {
	case x < 12:
		in.Op, in.Value = "set", uniqueValue(id, seq, cfg.valueSize)
	case x < 47:
		in.Op = "get"
	case x < 50:
		in.Op = "delete"
	case x < 75:
		in.Op = "gets"
	default:
		if s, ok := seen[in.Key]; ok {
			in.Op, in.Value, in.Expect, in.Token = "cas", uniqueValue(id, seq, cfg.valueSize), s.value, s.token
		} else {
			in.Op = "gets"
		}
	}
	return in
}

// uniqueValue is "c<client>-<seq>-" padded to size: no two writes store the same bytes.
func uniqueValue(id, seq, size int) string {
	v := fmt.Sprintf("c%d-%d-", id, seq)
	if len(v) < size {
		v += strings.Repeat("v", size-len(v))
	}
	return v
}

func appendRequest(b []byte, in Input) []byte {
	switch in.Op {
	case "set":
		b = fmt.Appendf(b, "set %s 0 0 %d\r\n%s\r\n", in.Key, len(in.Value), in.Value)
	case "cas":
		b = fmt.Appendf(b, "cas %s 0 0 %d %s\r\n%s\r\n", in.Key, len(in.Value), in.Token, in.Value)
	case "get", "gets", "delete":
		b = fmt.Appendf(b, "%s %s\r\n", in.Op, in.Key)
	case "incr":
		b = fmt.Appendf(b, "incr %s 1\r\n", in.Key)
	default:
		panic("unknown op " + in.Op)
	}
	return b
}

func readLine(r *bufio.Reader) (string, error) {
	l, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(l, "\r\n") {
		return "", fmt.Errorf("line without CRLF: %q", l)
	}
	return l[:len(l)-2], nil
}

// readReply reads the reply to in; for a gets that hit it also returns the cas token.
// Any reply the request cannot get is an error (the run stops: the protocol is broken).
func readReply(r *bufio.Reader, in Input) (Output, string, error) {
	l, err := readLine(r)
	if err != nil {
		return Output{}, "", err
	}
	bad := func() (Output, string, error) {
		return Output{}, "", fmt.Errorf("unexpected reply %q", l)
	}
	switch in.Op {
	case "get", "gets":
		switch {
		case l == "END":
			return Output{Kind: "miss"}, "", nil
		case strings.HasPrefix(l, "SERVER_ERROR out of memory writing get response"):
			return Output{Kind: "readerror"}, "", nil
		case !strings.HasPrefix(l, "VALUE "):
			return bad()
		}
		f := strings.Fields(l)
		if len(f) != 4+btoi(in.Op == "gets") || f[1] != in.Key || f[2] != "0" {
			return bad()
		}
		n, err := strconv.Atoi(f[3])
		if err != nil || n < 0 {
			return bad()
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return Output{}, "", err
		}
		if string(buf[n:]) != "\r\n" {
			return Output{}, "", fmt.Errorf("value of %s not followed by CRLF", in.Key)
		}
		end, err := readLine(r)
		if err != nil {
			return Output{}, "", err
		}
		if end != "END" {
			return Output{}, "", fmt.Errorf("no END after the value: %q", end)
		}
		token := ""
		if in.Op == "gets" {
			token = f[4]
		}
		return Output{Kind: "value", Value: string(buf[:n])}, token, nil
	case "set", "cas":
		switch {
		case l == "STORED":
			return Output{Kind: "stored"}, "", nil
		case l == "EXISTS" && in.Op == "cas":
			return Output{Kind: "exists"}, "", nil
		case l == "NOT_FOUND" && in.Op == "cas":
			return Output{Kind: "notfound"}, "", nil
		case l == "SERVER_ERROR out of memory storing object":
			return Output{Kind: "oom"}, "", nil
		}
	case "delete":
		switch l {
		case "DELETED":
			return Output{Kind: "deleted"}, "", nil
		case "NOT_FOUND":
			return Output{Kind: "notfound"}, "", nil
		}
	case "incr":
		switch {
		case l == "NOT_FOUND":
			return Output{Kind: "notfound"}, "", nil
		case l == "CLIENT_ERROR cannot increment or decrement non-numeric value":
			return Output{Kind: "nonnumeric"}, "", nil
		case strings.HasPrefix(l, "SERVER_ERROR out of memory"):
			return Output{Kind: "oom"}, "", nil
		}
		if _, err := strconv.ParseUint(l, 10, 64); err == nil {
			return Output{Kind: "number", Value: l}, "", nil
		}
	}
	return bad()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// serverStats returns the server's `stats` as a map (nil if they cannot be read).
func serverStats(addr string) map[string]string {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("stats\r\n")); err != nil {
		return nil
	}
	r := bufio.NewReader(conn)
	st := map[string]string{}
	for {
		l, err := readLine(r)
		if err != nil {
			return nil
		}
		if l == "END" {
			return st
		}
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "STAT" {
			st[f[1]] = f[2]
		}
	}
}
