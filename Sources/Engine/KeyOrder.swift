// The order of keys: unsigned bytewise (memcmp), shorter first on a common prefix.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Compares two keys bytewise: negative, zero or positive.
@inline(__always)
func compareKeys(_ lhs: [UInt8], _ rhs: [UInt8]) -> Int {
    let common = min(lhs.count, rhs.count)
    let order = common == 0 ? 0 : lhs.withUnsafeBytes { a in
        rhs.withUnsafeBytes { b in Int(memcmp(a.baseAddress!, b.baseAddress!, common)) }
    }
    return order != 0 ? order : lhs.count - rhs.count
}

/// The smallest key above every key that starts with `prefix`, or nil when there is none
/// (the prefix is all 0xFF bytes).
func keyAfterPrefix(_ prefix: [UInt8]) -> [UInt8]? {
    var end = prefix
    while let last = end.last {
        if last < 0xFF {
            end[end.count - 1] = last + 1
            return end
        }
        end.removeLast()
    }
    return nil
}
