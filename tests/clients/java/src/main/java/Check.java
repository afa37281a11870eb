import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * One application workload through a real Java client; prints what the application saw, one
 * line per operation, so the same run against hkv and memcached can be compared line by line.
 * Usage: Check spy|xmem text|binary host:port
 */
public class Check {
    interface Ops {
        Object set(String k, int exp, String v) throws Exception;
        Object get(String k) throws Exception;
        Object add(String k, String v) throws Exception;
        Object replace(String k, String v) throws Exception;
        Object append(String k, String v) throws Exception;
        Object prepend(String k, String v) throws Exception;
        long gets(String k) throws Exception;
        Object cas(String k, long cas, String v) throws Exception;
        long incr(String k, long by, long init) throws Exception;
        long decr(String k, long by, long init) throws Exception;
        Object delete(String k) throws Exception;
        Object touch(String k, int exp) throws Exception;
        Map<String, Object> multi(List<String> keys) throws Exception;
        void flush() throws Exception;
        void close() throws Exception;
    }

    static Ops spy(String addr, boolean binary) throws Exception {
        net.spy.memcached.ConnectionFactory f = binary
            ? new net.spy.memcached.BinaryConnectionFactory()
            : new net.spy.memcached.DefaultConnectionFactory();
        net.spy.memcached.MemcachedClient c =
            new net.spy.memcached.MemcachedClient(f, net.spy.memcached.AddrUtil.getAddresses(addr));
        return new Ops() {
            public Object set(String k, int exp, String v) throws Exception { return c.set(k, exp, v).get(); }
            public Object get(String k) { return c.get(k); }
            public Object add(String k, String v) throws Exception { return c.add(k, 0, v).get(); }
            public Object replace(String k, String v) throws Exception { return c.replace(k, 0, v).get(); }
            public Object append(String k, String v) throws Exception { return c.append(k, v).get(); }
            public Object prepend(String k, String v) throws Exception { return c.prepend(k, v).get(); }
            public long gets(String k) { net.spy.memcached.CASValue<Object> r = c.gets(k); return r == null ? -1 : r.getCas(); }
            public Object cas(String k, long cas, String v) { return c.cas(k, cas, v); }
            public long incr(String k, long by, long init) { return c.incr(k, by, init, 0); }
            public long decr(String k, long by, long init) { return c.decr(k, by, init, 0); }
            public Object delete(String k) throws Exception { return c.delete(k).get(); }
            public Object touch(String k, int exp) throws Exception { return c.touch(k, exp).get(); }
            public Map<String, Object> multi(List<String> keys) { return c.getBulk(keys); }
            public void flush() throws Exception { c.flush().get(); }
            public void close() { c.shutdown(); }
        };
    }

    static Ops xmem(String addr, boolean binary) throws Exception {
        net.rubyeye.xmemcached.XMemcachedClientBuilder b =
            new net.rubyeye.xmemcached.XMemcachedClientBuilder(net.rubyeye.xmemcached.utils.AddrUtil.getAddresses(addr));
        if (binary) {
            b.setCommandFactory(new net.rubyeye.xmemcached.command.BinaryCommandFactory());
        }
        b.setConnectTimeout(5000);
        b.setOpTimeout(5000);
        net.rubyeye.xmemcached.MemcachedClient c = b.build();
        return new Ops() {
            public Object set(String k, int exp, String v) throws Exception { return c.set(k, exp, v); }
            public Object get(String k) throws Exception { return c.get(k); }
            public Object add(String k, String v) throws Exception { return c.add(k, 0, v); }
            public Object replace(String k, String v) throws Exception { return c.replace(k, 0, v); }
            public Object append(String k, String v) throws Exception { return c.append(k, v); }
            public Object prepend(String k, String v) throws Exception { return c.prepend(k, v); }
            public long gets(String k) throws Exception { net.rubyeye.xmemcached.GetsResponse<Object> r = c.gets(k); return r == null ? -1 : r.getCas(); }
            public Object cas(String k, long cas, String v) throws Exception { return c.cas(k, 0, v, cas); }
            public long incr(String k, long by, long init) throws Exception { return c.incr(k, by, init); }
            public long decr(String k, long by, long init) throws Exception { return c.decr(k, by, init); }
            public Object delete(String k) throws Exception { return c.delete(k); }
            public Object touch(String k, int exp) throws Exception { return c.touch(k, exp); }
            public Map<String, Object> multi(List<String> keys) throws Exception { return c.get(keys); }
            public void flush() throws Exception { c.flushAll(); }
            public void close() throws Exception { c.shutdown(); }
        };
    }

    static void out(String what, Object v) {
        System.out.println(what + " -> " + v);
    }

    public static void main(String[] a) throws Exception {
        boolean binary = a[1].equals("binary");
        Ops c = a[0].equals("spy") ? spy(a[2], binary) : xmem(a[2], binary);
        String p = a[0] + "-" + a[1] + "-";
        c.flush();
        out("set", c.set(p + "k", 0, "v1"));
        out("get", c.get(p + "k"));
        out("get miss", c.get(p + "missing"));
        out("add existing", c.add(p + "k", "x"));
        out("add new", c.add(p + "new", "n"));
        out("replace missing", c.replace(p + "nope", "x"));
        out("replace", c.replace(p + "k", "v2"));
        out("append", c.append(p + "k", "-tail"));
        out("prepend", c.prepend(p + "k", "head-"));
        out("get", c.get(p + "k"));
        long cas = c.gets(p + "k");
        out("gets found", cas > 0);
        out("cas", c.cas(p + "k", cas, "v3"));
        out("cas stale", c.cas(p + "k", cas, "v4"));
        out("get", c.get(p + "k"));
        out("incr new", c.incr(p + "n", 5, 10));
        out("incr", c.incr(p + "n", 5, 10));
        out("decr", c.decr(p + "n", 100, 0));
        out("delete", c.delete(p + "k"));
        out("delete again", c.delete(p + "k"));
        out("touch missing", c.touch(p + "k", 100));
        out("touch", c.touch(p + "new", 100));
        StringBuilder big = new StringBuilder();
        for (int i = 0; i < 500_000; i++) {
            big.append((char) ('a' + i % 26));
        }
        out("set big", c.set(p + "big", 0, big.toString()));
        out("get big intact", big.toString().equals(c.get(p + "big")));
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < 50; i++) {
            keys.add(p + "m" + i);
            if (i % 2 == 0) {
                c.set(p + "m" + i, 0, "value" + i);
            }
        }
        out("multi", new TreeMap<>(c.multi(keys)));
        if (a[0].equals("spy")) {
            // A negative expiry: text says "already expired"; binary carries it unsigned,
            // a time in 2106 (xmemcached refuses it before sending).
            out("expired", c.set(p + "gone", -1, "x"));
            out("get expired", c.get(p + "gone"));
        }
        c.close();
        System.out.println("done");
    }
}
