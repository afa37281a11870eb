// hkv index kernels: the same table layout and hash functions as the CPU backend.
// SLOTS, PREF_BITS, MAX_DISPLACEMENTS, FMIX_C1, FMIX_C2 come from -D build options made
// from crates/index/src/hash.rs, so host and device cannot drift apart.
//
// Table: bucket i is table[i*2*SLOTS .. i*2*SLOTS+SLOTS) signatures, then SLOTS locations.
// Signature 0 is an empty slot; location 0xFFFFFFFF is "none".

#define EMPTY 0u
#define NO_LOC 0xFFFFFFFFu
#define BUCKET_WORDS (2 * SLOTS)

// Insert outcomes, as the host reads them.
#define OUT_INSERTED 0u
#define OUT_REPLACED 1u
#define OUT_FULL 2u
#define OUT_EVICTED 3u

inline uint fmix32(uint h) {
    h ^= h >> 16;
    h *= FMIX_C1;
    h ^= h >> 13;
    h *= FMIX_C2;
    return h ^ (h >> 16);
}

inline uint alt_bucket(uint b, uint sig, uint mask) {
    return b ^ ((fmix32(sig) | 1u) & mask);
}

inline uint find(__global const uint* table, uint sig, uint lo, uint mask) {
    uint b = lo & mask;
    for (int k = 0; k < 2; k++) {
        __global const uint* bk = table + (size_t)b * BUCKET_WORDS;
        for (int s = 0; s < SLOTS; s++) {
            if (bk[s] == sig) return bk[SLOTS + s];
        }
        b = alt_bucket(b, sig, mask);
    }
    return NO_LOC;
}

__kernel void search(__global const uint* table, __global const uint* sigs,
                     __global const uint* los, __global uint* out, uint n, uint mask) {
    uint i = get_global_id(0);
    if (i >= n) return;
    out[i] = find(table, sigs[i], los[i], mask);
}

// Work stealing (DIDO section IV-C): the device's work-groups and the host thread take
// GROUP-query chunks from one counter (`next`), so whichever is faster does more of the
// batch; `done` counts finished chunks, and the host returns once all are done, whether or
// not every work-group has even started (a late one finds the counter past the end and does
// nothing). One chunk per work-group, no loop: a barrier inside a loop with an exit is
// what kernel compilers (PoCL's among them) handle worst. Only where counter, inputs and
// outputs are the very bytes the host uses (a CPU device such as PoCL; the host proves it
// at start-up).
__kernel void search_steal(__global const uint* table, __global const uint* sigs,
                           __global const uint* los, __global uint* out, uint n, uint mask,
                           volatile __global uint* next, volatile __global uint* done) {
    __local uint chunk;
    uint lid = get_local_id(0);
    if (lid == 0) chunk = atomic_inc(next);
    barrier(CLK_LOCAL_MEM_FENCE);
    uint start = chunk * GROUP;
    uint i = start + lid;
    if (start < n && i < n) out[i] = find(table, sigs[i], los[i], mask);
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (lid == 0 && start < n) atomic_inc(done);
}

// One work-item per entry; the host guarantees no two entries of a launch share a
// signature, so the same-signature check cannot race with another claim of that signature.
__kernel void insert(__global uint* table, __global const uint* sigs, __global const uint* los,
                     __global const uint* locs, __global uint* kind, __global uint* old,
                     uint n, uint mask) {
    uint i = get_global_id(0);
    if (i >= n) return;
    uint sig = sigs[i];
    uint loc = locs[i];
    uint b1 = los[i] & mask;
    uint bs[2] = {b1, alt_bucket(b1, sig, mask)};
    for (int k = 0; k < 2; k++) {
        __global uint* bk = table + (size_t)bs[k] * BUCKET_WORDS;
        for (int s = 0; s < SLOTS; s++) {
            if (bk[s] == sig) {
                old[i] = atomic_xchg(&bk[SLOTS + s], loc);
                kind[i] = OUT_REPLACED;
                return;
            }
        }
    }
    uint pref = sig >> (32 - PREF_BITS);
    for (int k = 0; k < 2; k++) {
        __global uint* bk = table + (size_t)bs[k] * BUCKET_WORDS;
        for (int t = 0; t < SLOTS; t++) {
            int s = (pref + t) % SLOTS;
            // Claim by compare-exchange on the signature word; the location follows. Searches
            // run in a later launch on the same in-order queue, so none sees the gap.
            if (bk[s] == EMPTY && atomic_cmpxchg(&bk[s], EMPTY, sig) == EMPTY) {
                bk[SLOTS + s] = loc;
                kind[i] = OUT_INSERTED;
                return;
            }
        }
    }
    kind[i] = OUT_FULL;
}

inline uint empty_near(__global const uint* bk, uint pref) {
    for (int t = 0; t < SLOTS; t++) {
        uint s = (pref + t) % SLOTS;
        if (bk[s] == EMPTY) return s;
    }
    return SLOTS;
}

// Entries whose buckets were both full: one work-item walks a bounded cuckoo path for each,
// in order, exactly as the CPU backend does. At the bound the entry in hand is dropped and
// reported as evicted.
__kernel void displace(__global uint* table, __global const uint* sigs, __global const uint* los,
                       __global const uint* locs, __global uint* kind, __global uint* old,
                       __global const uint* pending, uint m, uint mask, __global uint* rng) {
    if (get_global_id(0) != 0) return;
    uint x = rng[0];
    for (uint j = 0; j < m; j++) {
        uint i = pending[j];
        uint sig = sigs[i];
        uint loc = locs[i];
        uint b1 = los[i] & mask;
        uint bs[2] = {b1, alt_bucket(b1, sig, mask)};
        bool done = false;
        for (int k = 0; k < 2 && !done; k++) {
            __global uint* bk = table + (size_t)bs[k] * BUCKET_WORDS;
            for (int s = 0; s < SLOTS && !done; s++) {
                if (bk[s] == sig) {
                    old[i] = bk[SLOTS + s];
                    bk[SLOTS + s] = loc;
                    kind[i] = OUT_REPLACED;
                    done = true;
                }
            }
        }
        for (int k = 0; k < 2 && !done; k++) {
            __global uint* bk = table + (size_t)bs[k] * BUCKET_WORDS;
            uint s = empty_near(bk, sig >> (32 - PREF_BITS));
            if (s < SLOTS) {
                bk[s] = sig;
                bk[SLOTS + s] = loc;
                kind[i] = OUT_INSERTED;
                done = true;
            }
        }
        if (done) continue;
        uint cs = sig, cl = loc, b = b1;
        for (uint d = 0; d < MAX_DISPLACEMENTS && !done; d++) {
            x ^= x << 13; x ^= x >> 17; x ^= x << 5;
            uint v = x % SLOTS;
            __global uint* bk = table + (size_t)b * BUCKET_WORDS;
            uint es = bk[v], el = bk[SLOTS + v];
            bk[v] = cs;
            bk[SLOTS + v] = cl;
            cs = es;
            cl = el;
            b = alt_bucket(b, cs, mask);
            __global uint* nb = table + (size_t)b * BUCKET_WORDS;
            uint s = empty_near(nb, cs >> (32 - PREF_BITS));
            if (s < SLOTS) {
                nb[s] = cs;
                nb[SLOTS + s] = cl;
                kind[i] = OUT_INSERTED;
                done = true;
            }
        }
        if (!done) {
            kind[i] = OUT_EVICTED;
            old[i] = cl;
        }
    }
    rng[0] = x;
}

// The host guarantees no two entries of a launch share a signature.
__kernel void remove(__global uint* table, __global const uint* sigs, __global const uint* los,
                     __global const uint* locs, __global uint* out, uint n, uint mask) {
    uint i = get_global_id(0);
    if (i >= n) return;
    uint sig = sigs[i];
    uint b = los[i] & mask;
    out[i] = 0;
    for (int k = 0; k < 2; k++) {
        __global uint* bk = table + (size_t)b * BUCKET_WORDS;
        for (int s = 0; s < SLOTS; s++) {
            if (bk[s] == sig) {
                if (bk[SLOTS + s] == locs[i]) {
                    bk[SLOTS + s] = NO_LOC;
                    bk[s] = EMPTY;
                    out[i] = 1;
                }
                return;
            }
        }
        b = alt_bucket(b, sig, mask);
    }
}
