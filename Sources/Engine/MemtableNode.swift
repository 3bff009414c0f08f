// A node of the memtable's skip list: one change of one key, at an 8-aligned address in
// the memtable's arena (MemtableArena.swift). Only `make` and `markOlderFollows` write a
// node, both before it is linked (Memtable.K2); every field is at an offset named in
// `Field` below, and nowhere else.
//
//   0  version      UInt64
//   8  valueLength  Int32   (-1 for a delete; -2 - n for a value of n bytes that lies
//                            outside the arena, in place: Memtable.K5)
//  12  keyLength    UInt16
//  14  height       UInt8   (1...Memtable.maxHeight)
//  15  flags        UInt8   (bit 0, `olderFollows`: the next node at level 0 is an older
//                            change of the same key, Memtable.K4)
//  16  links        height × 8 bytes, atomic: the next node at each level (0 = none)
//      key bytes, then value bytes (or, for a value in place, its address: 8 bytes)
//
// A value in place is told by its length alone and read through a call off the value
// getter's fast path, so that an inline value costs what it did before such values
// existed: with a flag bit tested in the getter, which a scan's loop inlines, a scan of
// 300,000 keys held in the memtable took 8 instructions a key more (callgrind).
import Atomics

/// A node of the memtable's skip list: a pointer into the arena, valid while the memtable
/// lives.
struct MemtableNode: Equatable {
    /// Where each field lies from a node's base.
    enum Field {
        static let version = 0
        static let valueLength = 8
        static let keyLength = 12
        static let height = 14
        static let flags = 15
        static let links = 16
    }

    /// The `flags` bit saying that the next node at level 0 is an older change of this key.
    private static let olderFollowsFlag: UInt8 = 1
    /// The `valueLength` of a delete.
    private static let deleteLength: Int32 = -1
    /// Bytes a value's address takes in a node.
    static let valueAddressBytes = 8

    let base: UnsafeMutableRawPointer

    init(_ base: UnsafeMutableRawPointer) { self.base = base }

    /// Bytes a node of `height` with a key of `key` and a value of `value` bytes takes.
    static func byteCount(height: Int, key: Int, value: Int) -> Int {
        Field.links + 8 * height + key + value
    }

    /// Writes a node at `base` (`byteCount` bytes there, 8-aligned), its links all empty.
    /// `valueInPlace`: the node keeps the value's address (`valueAddressBytes` bytes where
    /// the value would lie), not a copy of its bytes, which must outlive the node
    /// (Memtable.K5).
    static func make(at base: UnsafeMutableRawPointer, height: Int, version: UInt64, key: UnsafeRawBufferPointer,
                     value: UnsafeRawBufferPointer?, valueInPlace: Bool = false) -> MemtableNode {
        let length = value.map { Int32($0.count) } ?? Self.deleteLength
        base.storeBytes(of: version, toByteOffset: Field.version, as: UInt64.self)
        base.storeBytes(of: valueInPlace && value != nil ? -2 - length : length, toByteOffset: Field.valueLength, as: Int32.self)
        base.storeBytes(of: UInt16(key.count), toByteOffset: Field.keyLength, as: UInt16.self)
        base.storeBytes(of: UInt8(height), toByteOffset: Field.height, as: UInt8.self)
        base.storeBytes(of: UInt8(0), toByteOffset: Field.flags, as: UInt8.self)
        (base + Field.links).initializeMemory(as: Int.AtomicRepresentation.self, repeating: .init(0), count: height)
        let keyStart = base + Field.links + 8 * height
        if let address = key.baseAddress { keyStart.copyMemory(from: address, byteCount: key.count) }
        if valueInPlace, let value {
            (keyStart + key.count).storeBytes(of: UInt(bitPattern: value.baseAddress), as: UInt.self)
        } else if let value, let address = value.baseAddress {
            (keyStart + key.count).copyMemory(from: address, byteCount: value.count)
        }
        return MemtableNode(base)
    }

    /// Sets `olderFollows`. Writer only, before the node is linked (Memtable.K2, Memtable.K4).
    func markOlderFollows() {
        let flags = base.load(fromByteOffset: Field.flags, as: UInt8.self)
        base.storeBytes(of: flags | Self.olderFollowsFlag, toByteOffset: Field.flags, as: UInt8.self)
    }

    var bits: Int { Int(bitPattern: base) }
    var version: UInt64 { base.load(fromByteOffset: Field.version, as: UInt64.self) }
    var height: Int { Int(base.load(fromByteOffset: Field.height, as: UInt8.self)) }
    /// Whether the next node at level 0 is an older change of this node's key (Memtable.K4).
    var olderFollows: Bool { base.load(fromByteOffset: Field.flags, as: UInt8.self) & Self.olderFollowsFlag != 0 }
    /// Whether this node is a delete, known from its header alone.
    var isDelete: Bool { valueCount == Self.deleteLength }

    /// Whether a count at `version` counts this node, `hidden` saying whether the node before
    /// it was a visible change of its key (a delete included), which hides it; `hidden` is
    /// then set for the node after it. Read from the header alone (Memtable.K4;
    /// MemtableLookahead.C1).
    @inline(__always)
    func counts(at version: UInt64, hidden: inout Bool) -> Bool {
        let visible = self.version <= version
        defer { hidden = visible && olderFollows }
        return visible && !hidden && !isDelete
    }
    private var keyCount: Int { Int(base.load(fromByteOffset: Field.keyLength, as: UInt16.self)) }
    private var valueCount: Int32 { base.load(fromByteOffset: Field.valueLength, as: Int32.self) }

    var key: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base + Field.links + 8 * height, count: keyCount) }

    /// The value's bytes, or nil for a delete.
    var value: UnsafeRawBufferPointer? {
        let count = valueCount
        if _fastPath(count >= 0) { return UnsafeRawBufferPointer(start: base + Field.links + 8 * height + keyCount, count: Int(count)) }
        return Self.valueElsewhere(base, length: count)
    }

    /// The value of the node at `base`, whose `valueLength` is `length` (negative): nil for
    /// a delete, else the value the node points at (Memtable.K5).
    @inline(never)
    private static func valueElsewhere(_ base: UnsafeMutableRawPointer, length: Int32) -> UnsafeRawBufferPointer? {
        guard length != deleteLength else { return nil }
        let node = MemtableNode(base)
        let address = (base + Field.links + 8 * node.height + node.keyCount).loadUnaligned(as: UInt.self)
        return UnsafeRawBufferPointer(start: UnsafeRawPointer(bitPattern: address), count: Int(-2 - length))
    }

    var entry: MemtableEntry { MemtableEntry(version: version, value: value.map { Array($0) }) }

    func link(_ level: Int) -> UnsafeAtomic<Int> {
        UnsafeAtomic(at: (base + Field.links + 8 * level).assumingMemoryBound(to: Int.AtomicRepresentation.self))
    }

    func next(_ level: Int) -> MemtableNode? {
        UnsafeMutableRawPointer(bitPattern: link(level).load(ordering: .acquiring)).map(MemtableNode.init)
    }

    /// Compares this node's key with `key` (negative when the node's is smaller).
    @inline(__always)
    func compare(with key: UnsafeRawBufferPointer) -> Int { compareBytes(self.key, key) }
}
