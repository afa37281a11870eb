// KC and RD on the device (DIDO's key comparison and value read), where the device shares
// host memory: `arena` is the slab arena itself (CL_MEM_USE_HOST_PTR), so items are read in
// place, as the CPU reads them. The item layout comes from the store through the build
// options (-D HEADER_BYTES=... see hkv_store::device_layout), so the two never disagree.
//
// Per query, `at` is the byte offset of the chunk the index search found (NO_CHUNK for a
// miss); the key is keys[key_at[i] .. key_at[i + 1]].

#define NO_CHUNK 0xFFFFFFFFFFFFFFFFUL

// KC's verdicts, as the host's `Kc`.
#define KC_MISS 0
#define KC_EXPIRED 1
#define KC_LIVE 2
// A live item of another key (a signature collision): counted apart by the host.
#define KC_OTHER_KEY 3
// value_len of a value stored in parts: RD of such an item stays on the host.
#define VALUE_CHAINED 0xFFFFFFFFu

inline uint rd32(global const uchar* p) {
    return (uint)p[0] | ((uint)p[1] << 8) | ((uint)p[2] << 16) | ((uint)p[3] << 24);
}

// One work-item per query: the verdict and, for a live flat item, its value's length.
kernel void kc(global const uchar* arena, global const ulong* at, global const uchar* keys,
               global const uint* key_at, uint now, uint n, global uchar* found,
               global uint* value_len) {
    uint i = get_global_id(0);
    if (i >= n) return;
    ulong c = at[i];
    uchar verdict = KC_MISS;
    uint len = 0;
    if (c != NO_CHUNK) {
        global const uchar* item = arena + c;
        uint k0 = key_at[i];
        uint klen = key_at[i + 1] - k0;
        if (item[OFF_STATUS] == IN_USE) {
            bool same = item[OFF_KEY_LEN] == klen;
            for (uint b = 0; same && b < klen; b++) {
                same = item[HEADER_BYTES + b] == keys[k0 + b];
            }
            if (!same) {
                verdict = KC_OTHER_KEY;
            } else {
                // memcached: an item whose exptime is at or before now is gone (0: never).
                uint expiry = rd32(item + OFF_EXPIRY);
                if (expiry != 0 && expiry <= now) {
                    verdict = KC_EXPIRED;
                } else {
                    verdict = KC_LIVE;
                    len = item[OFF_LAYOUT] == LAYOUT_FLAT ? rd32(item + OFF_VALUE_LEN)
                                                          : VALUE_CHAINED;
                }
            }
        }
    }
    found[i] = verdict;
    value_len[i] = len;
}

// One work-group per value: its lanes copy the value (after the header and key of the
// chunk at `at[g]`) to out[out_at[g] .. out_at[g + 1]], a stride apart so a GPU's lanes read
// neighbouring bytes.
kernel void rd(global const uchar* arena, global const ulong* at, global const uint* out_at,
               uint n, global uchar* out) {
    uint g = get_group_id(0);
    if (g >= n) return;
    global const uchar* item = arena + at[g];
    global const uchar* value = item + HEADER_BYTES + item[OFF_KEY_LEN];
    uint o = out_at[g];
    uint len = out_at[g + 1] - o;
    for (uint b = get_local_id(0); b < len; b += get_local_size(0)) {
        out[o + b] = value[b];
    }
}
