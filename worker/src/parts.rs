//! A request's bytes as parts written in pieces: the head prefix built once per backend,
//! the per-request tail and the body, of which a write may take any prefix (the plain
//! socket's vectored writes and the TLS session's records alike).

use std::io::IoSlice;

/// The IoSlices of `parts` from byte `from` up to byte `upto`.
pub fn slices<'a>(parts: &[&'a [u8]; 3], mut from: usize, upto: usize) -> Vec<IoSlice<'a>> {
    let mut out = Vec::with_capacity(3);
    let mut left = upto.saturating_sub(from);
    for part in parts {
        if left == 0 {
            break;
        }
        if from >= part.len() {
            from -= part.len();
            continue;
        }
        let end = part.len().min(from + left);
        out.push(IoSlice::new(&part[from..end]));
        left -= end - from;
        from = 0;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_skip_what_was_sent() {
        let parts: [&[u8]; 3] = [b"abc", b"de", b"fgh"];
        let joined = |from| {
            slices(&parts, from, 8)
                .iter()
                .flat_map(|s| s.to_vec())
                .collect::<Vec<u8>>()
        };
        assert_eq!(joined(0), b"abcdefgh");
        assert_eq!(joined(2), b"cdefgh");
        assert_eq!(joined(3), b"defgh");
        assert_eq!(joined(5), b"fgh");
        assert_eq!(joined(7), b"h");
        assert!(slices(&parts, 8, 8).is_empty());
        // At most `upto` bytes in all: the pacer's bounded first write.
        let upto = |from, upto| {
            slices(&parts, from, upto)
                .iter()
                .flat_map(|s| s.to_vec())
                .collect::<Vec<u8>>()
        };
        assert_eq!(upto(0, 4), b"abcd");
        assert_eq!(upto(1, 5), b"bcde");
        assert_eq!(upto(4, 7), b"efg");
        assert!(upto(5, 5).is_empty());
    }
}
