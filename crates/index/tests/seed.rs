//! The hash seed (its own test binary: the seed is process-wide).

use hkv_index::{hash_key, set_hash_seed};

#[test]
fn regression_the_index_hash_is_seeded() {
    // An unseeded hash lets anyone compute offline which keys share a bucket pair and
    // flood it; each server process now draws its own seed.
    let keys: Vec<Vec<u8>> = (0..64).map(|i| format!("key{i}").into_bytes()).collect();
    let plain: Vec<_> = keys.iter().map(|k| hash_key(k)).collect();
    set_hash_seed(0x9e37_79b9_7f4a_7c15);
    let seeded: Vec<_> = keys.iter().map(|k| hash_key(k)).collect();
    let same = plain.iter().zip(&seeded).filter(|(a, b)| a == b).count();
    assert_eq!(same, 0, "a seed must move every key");
    // Stable within the process: the index finds what it stored.
    assert_eq!(seeded[7], hash_key(&keys[7]));
    set_hash_seed(0);
    assert_eq!(plain[7], hash_key(&keys[7]));
}
