// The order of keys: unsigned bytewise (memcmp), shorter first on a common prefix.
import CStrataPlatform
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Compares two keys bytewise: negative, zero or positive.
@inlinable @inline(__always)
package func compareKeys(_ lhs: [UInt8], _ rhs: [UInt8]) -> Int {
    lhs.withUnsafeBytes { a in rhs.withUnsafeBytes { b in compareBytes(a, b) } }
}

/// Compares two byte strings in key order: negative, zero or positive. Keys of up to 32
/// common bytes (most keys) are compared eight bytes at a time in place, as big-endian
/// integers: a call to memcmp cost more than the comparison (perf, readseq, 2026-11-23).
@inlinable @inline(__always)
package func compareBytes(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Int {
    let common = min(lhs.count, rhs.count)
    guard common <= 32 else {
        let order = Int(memcmp(lhs.baseAddress!, rhs.baseAddress!, common))
        return order != 0 ? order : lhs.count - rhs.count
    }
    var offset = 0
    while offset + 8 <= common {
        let left = UInt64(bigEndian: lhs.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        let right = UInt64(bigEndian: rhs.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        if left != right { return left < right ? -1 : 1 }
        offset += 8
    }
    if offset < common {
        if common >= 8 {
            // The common part's last eight bytes: those before `offset` are equal already.
            let left = UInt64(bigEndian: lhs.loadUnaligned(fromByteOffset: common - 8, as: UInt64.self))
            let right = UInt64(bigEndian: rhs.loadUnaligned(fromByteOffset: common - 8, as: UInt64.self))
            if left != right { return left < right ? -1 : 1 }
        } else {
            while offset < common {
                let left = lhs[offset]
                let right = rhs[offset]
                if left != right { return left < right ? -1 : 1 }
                offset += 1
            }
        }
    }
    return lhs.count - rhs.count
}

/// Compares the key made of `prefix` then `rest` with `other`, as `compareBytes` would
/// compare their concatenation, without putting the two together.
func compareSplit(_ prefix: UnsafeRawBufferPointer, _ rest: UnsafeRawBufferPointer, _ other: UnsafeRawBufferPointer) -> Int {
    guard prefix.count > 0 else { return compareBytes(rest, other) }
    let head = min(prefix.count, other.count)
    let order = compareBytes(prefix, UnsafeRawBufferPointer(rebasing: other[..<head]))
    guard order == 0 else { return order }
    // `other` ends inside the prefix: the key is the longer, unless it has no more bytes.
    guard other.count > prefix.count else { return prefix.count + rest.count - other.count }
    return compareBytes(rest, UnsafeRawBufferPointer(rebasing: other[prefix.count...]))
}

/// Whether two keys are the same bytes, compared from their ends: neighbouring keys in a
/// walk mostly share a prefix and differ at the end (an index entry's record id), so a key
/// that differs is told apart by its last eight bytes.
@inline(__always)
func equalBytes(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Bool {
    let count = lhs.count
    guard count == rhs.count else { return false }
    guard count >= 8 else { return compareBytes(lhs, rhs) == 0 }
    var end = count
    while end >= 8 {
        if lhs.loadUnaligned(fromByteOffset: end - 8, as: UInt64.self) != rhs.loadUnaligned(fromByteOffset: end - 8, as: UInt64.self) { return false }
        end -= 8
    }
    // The first `end` (< 8) bytes: the word at the start covers them.
    return end == 0 || lhs.loadUnaligned(as: UInt64.self) == rhs.loadUnaligned(as: UInt64.self)
}

/// The smallest key above every key that starts with `prefix`, or nil when there is none
/// (the prefix is all 0xFF bytes).
package func keyAfterPrefix(_ prefix: [UInt8]) -> [UInt8]? {
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

/// A range of keys: `lower..<upper` (either bound optional), built from a start, an end
/// and a prefix that all must hold.
public struct KeyRange: Sendable, Equatable {
    /// The smallest key in the range, if bounded below.
    public var lower: [UInt8]?
    /// The first key above the range, if bounded above.
    public var upper: [UInt8]?

    /// Keys in `start..<end` (either optional) that start with `prefix`.
    public init(from start: [UInt8]? = nil, to end: [UInt8]? = nil, prefix: [UInt8] = []) {
        lower = start
        upper = end
        if !prefix.isEmpty {
            if lower.map({ compareKeys($0, prefix) < 0 }) ?? true { lower = prefix }
            if let after = keyAfterPrefix(prefix), upper.map({ compareKeys(after, $0) < 0 }) ?? true { upper = after }
        }
    }

    /// Whether `key` lies in the range.
    public func contains(_ key: [UInt8]) -> Bool {
        (lower.map { compareKeys(key, $0) >= 0 } ?? true) && (upper.map { compareKeys(key, $0) < 0 } ?? true)
    }
}

/// The positions `0..<count` ordered by `key(position)` in key order, equal keys by
/// position (so the last change of a key ends its run). Keys already in that order come
/// back as they are after one pass over them. Otherwise each position is sorted by the
/// eight bytes after the keys' common prefix, as a big-endian integer (zero-padded): one
/// integer comparison settles most pairs, and a tie falls back to the whole key. Sorting
/// a commit's keys by a closure over the keys alone cost 1,479 instructions per key
/// (callgrind, fillrandom, batches of 1,000), a fifth of the commit.
func positionsInKeyOrder(count: Int, _ key: (Int) -> UnsafeRawBufferPointer) -> [Int] {
    guard count > 1 else { return Array(0..<count) }
    // Keys are read in turn from wherever they lie (a million replayed keys span 100 MiB):
    // each pass asks for the key a few places ahead so that its line arrives in time.
    let ahead = 8
    // Keys that come in order (sequential writes) need no sort: a first pass finds them,
    // and stops at the first pair out of order (fillseq's batches spent ~400 instructions
    // a key under callgrind sorting keys already in order).
    var ascending = true
    for position in 1..<count {
        if position + ahead < count { cplatform_prefetch(key(position + ahead).baseAddress) }
        if compareBytes(key(position - 1), key(position)) > 0 {
            ascending = false
            break
        }
    }
    if ascending { return Array(0..<count) }
    let first = key(0)
    var common = first.count
    for position in 1..<count where common > 0 {
        if position + ahead < count { cplatform_prefetch(key(position + ahead).baseAddress) }
        let other = key(position)
        var length = 0
        let limit = min(common, other.count)
        while length < limit && first[length] == other[length] { length += 1 }
        common = length
    }
    var order: [(word: UInt64, position: Int)] = []
    order.reserveCapacity(count)
    for position in 0..<count {
        if position + ahead < count { cplatform_prefetch(key(position + ahead).baseAddress.map { $0 + common }) }
        let bytes = key(position)
        var word: UInt64 = 0
        for index in common..<(common + 8) { word = word << 8 | UInt64(index < bytes.count ? bytes[index] : 0) }
        order.append((word, position))
    }
    guard count >= radixSortMinimum else {
        order.sort { left, right in
            if left.word != right.word { return left.word < right.word }
            let byKey = compareBytes(key(left.position), key(right.position))
            return byKey != 0 ? byKey < 0 : left.position < right.position
        }
        return order.map(\.position)
    }
    // A commit's batch: sorted by its words with a stable radix sort (no comparison per
    // pair: the comparison sort cost ~620 instructions a key of fillrandom under callgrind),
    // then each run of equal words by whole key, positions already in order within it.
    sortByWord(&order)
    var start = 0
    while start < count {
        var end = start + 1
        while end < count && order[end].word == order[start].word { end += 1 }
        if end - start > 1 {
            // Insertion sort, moving an entry only past greater keys: stable.
            for index in (start + 1)..<end {
                let entry = order[index]
                var slot = index
                while slot > start && compareBytes(key(order[slot - 1].position), key(entry.position)) > 0 {
                    order[slot] = order[slot - 1]
                    slot -= 1
                }
                order[slot] = entry
            }
        }
        start = end
    }
    return order.map(\.position)
}

/// Below this many keys a comparison sort is cheaper than the radix sort's 256 counters
/// per pass.
let radixSortMinimum = 256

/// Sorts `order` by `word`, stably: a least-significant-byte-first radix sort, skipping
/// each byte that all words share.
private func sortByWord(_ order: inout [(word: UInt64, position: Int)]) {
    let count = order.count
    var scratch = order
    withUnsafeTemporaryAllocation(of: Int.self, capacity: 256) { counts in
        order.withUnsafeMutableBufferPointer { original in
            scratch.withUnsafeMutableBufferPointer { spare in
                var source = original
                var target = spare
                for shift in stride(from: UInt64(0), to: 64, by: 8) {
                    counts.initialize(repeating: 0)
                    for entry in source { counts[Int(truncatingIfNeeded: entry.word >> shift) & 0xFF] += 1 }
                    if counts[Int(truncatingIfNeeded: source[0].word >> shift) & 0xFF] == count { continue }
                    var total = 0
                    for bucket in 0..<256 {
                        let bucketCount = counts[bucket]
                        counts[bucket] = total
                        total += bucketCount
                    }
                    for entry in source {
                        let bucket = Int(truncatingIfNeeded: entry.word >> shift) & 0xFF
                        target[counts[bucket]] = entry
                        counts[bucket] += 1
                    }
                    swap(&source, &target)
                }
                if source.baseAddress != original.baseAddress {
                    for index in 0..<count { original[index] = source[index] }
                }
            }
        }
    }
}

/// Copies `count` bytes, a key or part of one, from `source` to `target` (not
/// overlapping): keys of up to 32 bytes in two overlapping loads and stores of their
/// length class, in line, where a call to `memcpy` cost more than the copy.
@inline(__always)
func copyKeyBytes(to target: UnsafeMutableRawPointer, from source: UnsafeRawPointer, count: Int) {
    switch count {
    case 0: break
    case 1...3:
        target.storeBytes(of: source.load(as: UInt8.self), as: UInt8.self)
        target.storeBytes(of: source.load(fromByteOffset: count / 2, as: UInt8.self), toByteOffset: count / 2, as: UInt8.self)
        target.storeBytes(of: source.load(fromByteOffset: count - 1, as: UInt8.self), toByteOffset: count - 1, as: UInt8.self)
    case 4...7:
        target.storeBytes(of: source.loadUnaligned(as: UInt32.self), as: UInt32.self)
        target.storeBytes(of: source.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self), toByteOffset: count - 4, as: UInt32.self)
    case 8...16:
        target.storeBytes(of: source.loadUnaligned(as: UInt64.self), as: UInt64.self)
        target.storeBytes(of: source.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self), toByteOffset: count - 8, as: UInt64.self)
    case 17...32:
        target.storeBytes(of: source.loadUnaligned(as: UInt64.self), as: UInt64.self)
        target.storeBytes(of: source.loadUnaligned(fromByteOffset: 8, as: UInt64.self), toByteOffset: 8, as: UInt64.self)
        target.storeBytes(of: source.loadUnaligned(fromByteOffset: count - 16, as: UInt64.self), toByteOffset: count - 16, as: UInt64.self)
        target.storeBytes(of: source.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self), toByteOffset: count - 8, as: UInt64.self)
    default:
        target.copyMemory(from: source, byteCount: count)
    }
}
