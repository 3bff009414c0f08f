import StrataFileIO
import Testing
@testable import StrataEngine

/// `positionsInKeyOrder` sorts by an integer of the eight bytes after the common prefix
/// before comparing keys: it must give exactly the order of a plain sort by key, then by
/// position, for keys of any length, with zero bytes, shared prefixes and duplicates, in
/// any order or already in order.
@Suite struct KeyOrderTests {
    /// `equalBytes` (compared from the end, a word at a time) says what `compareBytes`
    /// says of equality, and `compareBytes` orders as the standard library's lexicographic
    /// order does, for keys of every length up to 40 differing in any one byte or in length.
    @Test func equalityFromTheEndAgreesWithTheOrder() {
        print("KeyOrderTests equality seed 21")
        var random = SplitMix64(seed: 21)
        for _ in 0..<20_000 {
            let count = Int(random.next() % 41)
            let key = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next() % 3) }
            var other = key
            switch random.next() % 3 {
            case 0: if count > 0 { other[Int(random.next() % UInt64(count))] ^= UInt8(truncatingIfNeeded: 1 + random.next() % 255) }
            case 1: other.append(UInt8(truncatingIfNeeded: random.next() % 3))
            default: break
            }
            let equal = key.withUnsafeBytes { key in other.withUnsafeBytes { equalBytes(key, $0) } }
            #expect(equal == (compareKeys(key, other) == 0), "\(key) \(other)")
            // The order against the standard library's, both ways round.
            let order = compareKeys(key, other)
            #expect((order < 0) == key.lexicographicallyPrecedes(other) && (order > 0) == other.lexicographicallyPrecedes(key),
                    "\(key) \(other)")
        }
    }

    /// `compareSplit` (a leaf's key as its shared prefix and its rest) orders as
    /// `compareBytes` orders the two put together, whatever the lengths: the other key
    /// shorter than the prefix, as long, longer, or empty, and either part empty.
    @Test func aKeyInTwoPartsComparesAsTheWhole() {
        print("KeyOrderTests split seed 34")
        var random = SplitMix64(seed: 34)
        for _ in 0..<20_000 {
            let whole = (0..<Int(random.next() % 41)).map { _ in UInt8(truncatingIfNeeded: random.next() % 3) }
            let cut = whole.isEmpty ? 0 : Int(random.next() % UInt64(whole.count + 1))
            var other = Array(whole.prefix(Int(random.next() % UInt64(whole.count + 2))))
            if random.next() % 2 == 0 { other += (0..<Int(random.next() % 4)).map { _ in UInt8(truncatingIfNeeded: random.next() % 3) } }
            let split = whole.withUnsafeBytes { whole in
                other.withUnsafeBytes { other in
                    compareSplit(UnsafeRawBufferPointer(rebasing: whole[..<cut]), UnsafeRawBufferPointer(rebasing: whole[cut...]), other)
                }
            }
            #expect(split.signum() == compareKeys(whole, other).signum(), "\(whole) cut at \(cut) against \(other)")
        }
    }

    @Test(arguments: [UInt64(1), 2, 3, 4])
    func ordersAsAPlainSortByKeyThenPosition(seed: UInt64) {
        print("KeyOrderTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        for round in 0..<200 {
            let prefix = (0..<Int(random.next() % 12)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let alphabet: [UInt8] = [0, 1, 0x7F, 0x80, 0xFF]
            // Every tenth round is a commit's size, sorted by radix rather than comparison.
            let size = round % 10 == 9 ? radixSortMinimum + Int(random.next() % 1_500) : Int(random.next() % 60 + 1)
            var keys: [[UInt8]] = (0..<size).map { _ in
                prefix + (0..<Int(random.next() % 14)).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }
            }
            if random.next() % 3 == 0, let some = keys.randomElement(using: &random) { keys.append(some) }
            // A third of the rounds come in key order (sequential writes), duplicates kept
            // in place, and half of those with one pair of neighbours swapped.
            if round % 3 == 1 {
                keys.sort { compareKeys($0, $1) < 0 }
                if random.next() % 2 == 0, keys.count > 1 {
                    let first = Int(random.next() % UInt64(keys.count - 1))
                    keys.swapAt(first, first + 1)
                }
            }
            let expected = keys.indices.sorted { left, right in
                let byKey = compareKeys(keys[left], keys[right])
                return byKey != 0 ? byKey < 0 : left < right
            }
            let offsets = keys.reduce(into: [0]) { $0.append($0.last! + $1.count) }
            let got = keys.joined().map { $0 }.withUnsafeBytes { bytes in
                positionsInKeyOrder(count: keys.count) { UnsafeRawBufferPointer(rebasing: bytes[offsets[$0]..<offsets[$0 + 1]]) }
            }
            #expect(got == expected, "seed \(seed) round \(round): \(keys)")
        }
    }
}
