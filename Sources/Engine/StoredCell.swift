// A leaf as the tree writer reads it: its cells left in the page's bytes, each copied into
// the leaves a checkpoint writes without first becoming a `LeafEntry` (two arrays, a key
// and a value, for every cell of every leaf a checkpoint rewrites).
//
// The checks are decodeLeaf's: checksum and header (by the page file), hints, slots,
// lengths, flags, overflow references and key order, so a cell copied from here is one
// `decodeLeaf` would have accepted.
import StrataCodec

/// A tree page as the tree writer reads it (`PageFile.storedNode`).
enum StoredNode {
    case leaf([StoredCell])
    case branch([BranchEntry])
}

/// The bytes of a leaf the tree writer read (a compressed leaf's expansion), and its keys
/// whole: the page itself when it stores every key whole, else each key's prefix and rest
/// side by side in one array.
final class StoredLeaf {
    let page: [UInt8]
    fileprivate(set) var keys: [UInt8]

    fileprivate init(page: [UInt8]) {
        self.page = page
        keys = page
    }
}

/// One cell of a `StoredLeaf`: its key in the leaf's `keys`, its version, and the rest of
/// the cell as stored (its flags and its inline value or overflow reference), which is the
/// same in every format and is copied as it is.
struct StoredCell {
    let leaf: StoredLeaf
    private let keyStart: Int32
    private let keyLength: Int32
    private let bodyStart: Int32
    private let bodyLength: Int32
    let version: UInt64

    var keyCount: Int { Int(keyLength) }

    /// Calls `body` with the key's bytes, borrowed.
    @inline(__always)
    func withKey<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try leaf.keys.withUnsafeBytes { keys in
            try body(UnsafeRawBufferPointer(rebasing: keys[Int(keyStart)..<Int(keyStart + keyLength)]))
        }
    }

    /// Calls `body` with the flags byte and what follows it in the cell.
    @inline(__always)
    func withBody<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try leaf.page.withUnsafeBytes { page in
            try body(UnsafeRawBufferPointer(rebasing: page[Int(bodyStart)..<Int(bodyStart + bodyLength)]))
        }
    }

    var isTombstone: Bool { leaf.page[Int(bodyStart)] == PageCodec.tombstoneFlag }

    /// The overflow value the cell refers to, if it has one (checked when the leaf was read).
    var largeValue: LargeValue? {
        let flags = leaf.page[Int(bodyStart)]
        guard flags == PageCodec.overflowFlag || flags == PageCodec.runFlag else { return nil }
        return leaf.page.withUnsafeBytes { page in
            try! PageCodec.decodeLargeValue(flags, page, at: Int(bodyStart) + 1, cell: 0).0
        }
    }

    /// Bytes the cell takes in a leaf of the current format, its slot included: as
    /// `LeafEntry.cellBytes` counts the entry it decodes to.
    var cellBytes: Int {
        PageCodec.hintedSlotBytes + varintBytes(Int(keyLength)) + Int(keyLength) + varintBytes(version) + Int(bodyLength)
    }

    fileprivate init(leaf: StoredLeaf, key: Range<Int>, version: UInt64, body: Range<Int>) {
        self.leaf = leaf
        keyStart = Int32(key.lowerBound)
        keyLength = Int32(key.count)
        bodyStart = Int32(body.lowerBound)
        bodyLength = Int32(body.count)
        self.version = version
    }
}

extension PageCodec {
    /// The cells of leaf `page` (verified, and expanded when it was compressed), checked as
    /// `decodeLeaf` checks them.
    static func storedCells(_ page: [UInt8], count: Int) throws(PageDefect) -> [StoredCell] {
        try checkHints(page, count: count)
        let leaf = StoredLeaf(page: page)
        let cells = page.withUnsafeBytes { bytes in
            Result { () throws(PageDefect) -> [StoredCell] in
                let view = TreePage(bytes: bytes, type: .leaf, count: count, word: 0)
                // Each key is its rest in the cell after the prefix the page stores once:
                // keys in order have their rests in order.
                let prefix = view.isElided ? storedHintOffset(bytes) : 0
                guard hintedSlotsStart + prefix <= bytes.count else { throw PageDefect("its keys' shared prefix runs past the page") }
                var cells: [StoredCell] = []
                cells.reserveCapacity(count)
                // Where each key's rest lies in the page, and the bytes of the whole keys,
                // for the keys' array (when the page elides their prefix) made in one go.
                var rests: [Range<Int>] = []
                if prefix > 0 { rests.reserveCapacity(count) }
                var keyBytes = 0
                var previous: UnsafeRawBufferPointer?
                for index in 0..<count {
                    let (stored, version, body) = try view.leafCellParts(index)
                    guard prefix + stored.count <= Limits.maxKeyBytes else {
                        throw PageDefect("cell \(index) has a key of \(prefix + stored.count) bytes")
                    }
                    let rest = UnsafeRawBufferPointer(rebasing: bytes[stored])
                    if let previous, compareBytes(previous, rest) >= 0 { throw PageDefect("cell \(index) is out of key order") }
                    previous = rest
                    var key = stored
                    if prefix > 0 {
                        key = keyBytes..<(keyBytes + prefix + stored.count)
                        keyBytes = key.upperBound
                        rests.append(stored)
                    }
                    cells.append(StoredCell(leaf: leaf, key: key, version: version, body: body))
                }
                if keyBytes > 0 {
                    let shared = bytes.baseAddress! + hintedSlotsStart
                    leaf.keys = [UInt8](unsafeUninitializedCapacity: keyBytes) { keys, initialized in
                        var at = keys.baseAddress!
                        for rest in rests {
                            UnsafeMutableRawPointer(at).copyMemory(from: shared, byteCount: prefix)
                            UnsafeMutableRawPointer(at + prefix).copyMemory(from: bytes.baseAddress! + rest.lowerBound, byteCount: rest.count)
                            at += prefix + rest.count
                        }
                        initialized = keyBytes
                    }
                }
                return cells
            }
        }
        return try cells.get()
    }
}
