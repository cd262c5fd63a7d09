/// Byte counts summed from what a server lists or a record states: `UInt64.max` where the sum
/// overflows, never a trap (a damaged or hostile listing could claim sizes that add past 2^64).
extension UInt64 {
    func saturatingAdd(_ other: UInt64) -> UInt64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? .max : sum
    }
}

extension Sequence {
    /// The sum of `bytes` over the elements, saturating at `UInt64.max`.
    func saturatingSum(_ bytes: (Element) throws -> UInt64) rethrows -> UInt64 {
        try reduce(0) { $0.saturatingAdd(try bytes($1)) }
    }
}
