//! MySQL GTID sets as the server prints them, read without a server: whether a set holds a
//! GTID, for tests that check a replica's received set from a task the moment a client's
//! answer arrives (asking a server's `GTID_SUBSET` would take a round trip and a server).

/// True if the GTID set `set` (`uuid:1-5:7,uuid:tag:1-3`, as `gtid_executed` or
/// `RECEIVED_TRANSACTION_SET` show it, line breaks allowed) holds `gtid` (`uuid:n` or
/// `uuid:tag:n`).
///
/// # Panics
/// If `gtid` is not a GTID.
pub fn gtid_set_holds(set: &str, gtid: &str) -> bool {
    let (source, number) = parse_gtid(gtid).unwrap_or_else(|| panic!("not a GTID: {gtid}"));
    set.split(',')
        .flat_map(intervals)
        .any(|(s, first, last)| s == source && (first..=last).contains(&number))
}

/// The newest number of `uuid`'s own (untagged) intervals in `set`: with it, `uuid:n` is the
/// newest GTID that server committed itself.
pub fn newest_of(set: &str, uuid: &str) -> Option<u64> {
    let uuid = uuid.trim().to_ascii_lowercase();
    set.split(',')
        .flat_map(intervals)
        .filter(|(source, _, _)| *source == uuid)
        .map(|(_, _, last)| last)
        .max()
}

/// `(uuid[:tag], n)` of a GTID, lowercased as the server compares them.
fn parse_gtid(gtid: &str) -> Option<(String, u64)> {
    let (source, number) = gtid.trim().rsplit_once(':')?;
    Some((source.to_ascii_lowercase(), number.parse().ok()?))
}

/// One UUID's part of a set as `(uuid[:tag], first, last)` intervals: after the UUID, a tag
/// applies to the intervals that follow it.
fn intervals(part: &str) -> Vec<(String, u64, u64)> {
    let mut pieces = part.trim().split(':');
    let uuid = pieces.next().unwrap_or_default().to_ascii_lowercase();
    let mut source = uuid.clone();
    let mut found = Vec::new();
    for piece in pieces {
        let (first, last) = piece.split_once('-').unwrap_or((piece, piece));
        match (first.parse(), last.parse()) {
            (Ok(first), Ok(last)) => found.push((source.clone(), first, last)),
            _ => source = format!("{uuid}:{}", piece.to_ascii_lowercase()),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::gtid_set_holds;

    const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const B: &str = "fb937fe4-ede8-11f1-9bbf-02fc00000001";

    #[test]
    fn holds_what_its_intervals_cover() {
        let set = format!("{A}:1-5:7,\n{B}:3");
        let cases = [
            (format!("{A}:1"), true),
            (format!("{A}:5"), true),
            (format!("{A}:6"), false),
            (format!("{A}:7"), true),
            (format!("{A}:8"), false),
            (format!("{B}:3"), true),
            (format!("{B}:2"), false),
            (format!("{}:1", A.to_uppercase()), true),
        ];
        for (gtid, held) in cases {
            assert_eq!(gtid_set_holds(&set, &gtid), held, "{gtid} in {set}");
        }
        assert!(!gtid_set_holds("", &format!("{A}:1")));
    }

    #[test]
    fn tags_apply_to_the_intervals_after_them() {
        let set = format!("{A}:1-3:blue:5-6");
        assert!(gtid_set_holds(&set, &format!("{A}:2")));
        assert!(!gtid_set_holds(&set, &format!("{A}:5")));
        assert!(gtid_set_holds(&set, &format!("{A}:blue:5")));
        assert!(!gtid_set_holds(&set, &format!("{A}:blue:2")));
    }
}
