// A verified page as the cache holds it: the raw bytes, searched in place. A point lookup
// binary-searches the slots comparing keys where they lie (memcmp, no allocation) and
// decodes only the cell it lands on; whole-page decoding is for scans, checkpoints and
// `verify`. Every slot and length is checked against the page's bounds on use (the
// checksum already matched; bounds keep a crafted page from trapping).
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A page whose checksum, type and ID were verified when it was read.
struct PageView: Sendable {
    let bytes: [UInt8]
    let type: PageType
    let count: Int
    /// The header's type-specific word (a branch's leftmost child).
    let word: UInt64

    /// The child of this branch whose range holds `key`.
    func child(for key: [UInt8]) throws -> PageID {
        // The last cell whose key is ≤ key, or the leftmost child when none is.
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if try compareCell(middle, with: key) <= 0 { low = middle + 1 } else { high = middle }
        }
        let child: UInt64
        if low == 0 {
            child = word
        } else {
            let (start, length) = try bytes.withUnsafeBytes { page in
                try PageCodec.keyLocation(page, index: low - 1, count: count)
            }
            guard start + length + 8 <= bytes.count else { throw PageDefect("cell \(low - 1) runs past the page") }
            child = bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: start + length, as: UInt64.self)) }
        }
        guard child >= PageID.firstDataPage.rawValue else { throw PageDefect("a child pointer names page \(child)") }
        return PageID(child)
    }

    /// The entry of this leaf for `key`, or nil.
    func leafEntry(for key: [UInt8]) throws -> LeafEntry? {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            let order = try compareCell(middle, with: key)
            if order == 0 { return try PageCodec.decodeLeafCell(bytes, index: middle, count: count) }
            if order < 0 { low = middle + 1 } else { high = middle }
        }
        return nil
    }

    /// Compares cell `index`'s key with `key` (negative when the cell's is smaller).
    private func compareCell(_ index: Int, with key: [UInt8]) throws -> Int {
        try bytes.withUnsafeBytes { page in
            let (start, length) = try PageCodec.keyLocation(page, index: index, count: count)
            let common = min(length, key.count)
            let order = common == 0 ? 0 : key.withUnsafeBytes { other in
                Int(memcmp(page.baseAddress! + start, other.baseAddress!, common))
            }
            return order != 0 ? order : length - key.count
        }
    }
}
