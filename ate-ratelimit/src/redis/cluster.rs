//! Redis Cluster routing, as the store needs it: the slot of a key.

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the
/// text between the first `{` and the next `}`, if not empty) or of the
/// whole key, modulo 16,384.
pub(super) fn slot(key: &[u8]) -> usize {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    usize::from(crc16::State::<crc16::XMODEM>::calculate(tag)) % 16_384
}
