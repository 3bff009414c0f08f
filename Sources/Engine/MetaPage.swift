// The two meta pages (pages 0 and 1): which tree, free list and checkpoint the data file
// holds (FORMAT.md, "Meta pages"). Checkpoint generation g writes meta page g % 2, so a
// torn meta write leaves the other, older one valid; open takes the newest valid one.
import StrataCodec

struct MetaPage: Equatable, Sendable {
    static let magic: [UInt8] = Array("STRATADB".utf8)
    static let version: UInt16 = 7

    var pageBytes: Int
    /// How many checkpoints made this file; the newest valid meta page wins.
    var generation: UInt64
    /// The B+tree's root (`.none` when the tree is empty).
    var root: PageID
    /// The first free-list page (`.none` when no page is free).
    var freeListHead: PageID
    /// The last version (WAL LSN) folded into the tree.
    var checkpointVersion: UInt64
    /// Pages in the file: every page ID is below this.
    var pageCount: UInt64
    /// Live keys in the tree (tombstones not counted).
    var keyCount: UInt64
    /// Levels of the tree (0 when empty, 1 when the root is a leaf).
    var height: UInt64

    func encoded() -> [UInt8] {
        var writer = ByteWriter(capacity: pageBytes)
        writer.write(UInt32(0))
        writer.write(PageType.meta.rawValue)
        writer.writeZeros(3)
        writer.write(contentsOf: Self.magic)
        writer.write(Self.version)
        writer.write(UInt16(0))
        writer.write(UInt32(pageBytes))
        writer.write(generation)
        writer.write(root.rawValue)
        writer.write(freeListHead.rawValue)
        writer.write(checkpointVersion)
        writer.write(pageCount)
        writer.write(keyCount)
        writer.write(height)
        writer.writeZeros(pageBytes - writer.count)
        var page = writer.bytes
        PageCodec.seal(&page)
        return page
    }

    /// The page size a meta page declares, read before its checksum can be checked (the
    /// checksum covers the whole page). nil when the bytes are not a meta page.
    static func declaredPageBytes(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 24, bytes[4] == PageType.meta.rawValue, Array(bytes[8..<16]) == magic else { return nil }
        let value = bytes.withUnsafeBytes { Int(UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: 20, as: UInt32.self))) }
        return Limits.pageBytesRange.contains(value) && value & (value - 1) == 0 ? value : nil
    }

    /// Decodes and verifies a whole meta page.
    static func decode(_ page: [UInt8]) throws(MetaDefect) -> MetaPage {
        guard page.count >= Limits.pageBytesRange.lowerBound, declaredPageBytes(page) == page.count else {
            throw .invalid("it is not a meta page of its size")
        }
        let stored = page.withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) }
        let computed = page.withUnsafeBytes { CRC32C.extend(0, UnsafeRawBufferPointer(rebasing: $0[4...])) }
        guard stored == computed else { throw .invalid("its checksum does not match") }
        var reader = ByteReader(page, start: 16, end: 88)
        do {
            let version = try reader.readUInt16()
            guard version <= Self.version else { throw MetaDefect.newerVersion(version) }
            // Bytes 5–7, 18–19 and 80 on are zero in every meta page a format wrote.
            guard try reader.readUInt16() == 0, page[5..<8].allSatisfy({ $0 == 0 }), page[80...].allSatisfy({ $0 == 0 }) else {
                throw MetaDefect.invalid("its reserved bytes (5–7, 18–19, 80 on) are not zero")
            }
            let meta = MetaPage(pageBytes: Int(try reader.readUInt32()), generation: try reader.readUInt64(),
                                root: PageID(try reader.readUInt64()), freeListHead: PageID(try reader.readUInt64()),
                                checkpointVersion: try reader.readUInt64(), pageCount: try reader.readUInt64(),
                                keyCount: try reader.readUInt64(), height: try reader.readUInt64())
            guard meta.pageCount >= 2, meta.pageCount <= Limits.maxPageCount,
                  meta.root == .none || (meta.root >= .firstDataPage && meta.root.rawValue < meta.pageCount),
                  meta.freeListHead == .none
                    || (meta.freeListHead >= .firstDataPage && meta.freeListHead.rawValue < meta.pageCount),
                  meta.height <= 64, (meta.root == .none) == (meta.height == 0),
                  meta.generation < UInt64.max / 2, meta.checkpointVersion < UInt64.max / 2,
                  // No page holds more keys than it has bytes: a count above that is damage
                  // (and this bound keeps counting on it from overflowing).
                  meta.keyCount <= meta.pageCount * UInt64(meta.pageBytes) else {
                throw MetaDefect.invalid("its page references or counts are out of range")
            }
            return meta
        } catch let defect as MetaDefect {
            throw defect
        } catch {
            throw .invalid("it is truncated")
        }
    }
}

enum MetaDefect: Error, CustomStringConvertible {
    case invalid(String)
    case newerVersion(UInt16)

    var description: String {
        switch self {
        case let .invalid(reason): reason
        case let .newerVersion(version): "it was written by format version \(version)"
        }
    }
}
