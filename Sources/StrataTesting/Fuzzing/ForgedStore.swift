// Hostile stores made from valid ones, with every checksum resealed so that the bytes reach
// the decoders a checksum would otherwise keep them from: any numeric field of a segment
// header, a frame header, a meta page or a page header set to any value, and a log segment
// holding any batch bytes. The field-extremes tests and the fuzz targets' structure-aware
// mode build their files with it (FORMAT.md names every field).
import Foundation
import StrataCodec
import StrataWAL

/// A store's files as bytes, by path relative to the store's directory (`data`,
/// `wal/wal-0000000000000001.seg`, …), to forge and write back.
public struct StoreImage: Sendable {
    public var files: [String: [UInt8]]

    public init(files: [String: [UInt8]]) { self.files = files }

    /// Reads the data file and the log segments of the store at `directory`.
    public init(directory: URL) throws {
        var files: [String: [UInt8]] = [:]
        files["data"] = [UInt8](try Data(contentsOf: directory.appendingPathComponent("data")))
        let log = directory.appendingPathComponent("wal")
        for name in try FileManager.default.contentsOfDirectory(atPath: log.path) where name.hasSuffix(".seg") {
            files["wal/" + name] = [UInt8](try Data(contentsOf: log.appendingPathComponent(name)))
        }
        self.files = files
    }

    /// Writes every file back under `directory`.
    public func write(to directory: URL) throws {
        for (path, bytes) in files { try Data(bytes).write(to: directory.appendingPathComponent(path)) }
    }

    /// The path of the log's last segment (the highest sequence number).
    public var lastSegment: String? { files.keys.filter { $0.hasPrefix("wal/wal-") && $0.hasSuffix(".seg") }.max() }
}

/// Where forged values go, and how.
public enum ForgedStore {
    /// A structure of the store's files that holds numeric fields.
    public enum Structure: String, Sendable, CaseIterable {
        /// The last log segment's header.
        case segmentHeader
        /// The header of the last segment's first and last frames.
        case firstFrame, lastFrame
        /// The meta page of the highest generation.
        case metaPage
        /// The tree's root page, and its leftmost leaf.
        case rootPage, leafPage
    }

    /// One numeric field: its structure, its offset in it and its width in bytes. The
    /// offset of a tree page's slot (`firstSlot`, `secondSlot`) is the slot's number: where
    /// the slots start depends on the page (FORMAT.md, "Leaf and branch pages").
    public struct Field: Sendable, CustomStringConvertible {
        public let structure: Structure
        public let name: String
        public let offset: Int
        public let width: Int

        /// Whether `offset` numbers a slot of a tree page rather than a byte.
        var isSlot: Bool { name.hasSuffix("Slot") }

        public var description: String {
            "\(structure.rawValue).\(name) (\(isSlot ? "slot" : "offset") \(offset), \(width) bytes)"
        }
    }

    /// Every numeric field of the structures (FORMAT.md), reserved ones included.
    public static let fields: [Field] = {
        let segment: [(String, Int, Int)] = [("version", 8, 2), ("headerBytes", 10, 2), ("salt", 12, 4), ("sequence", 16, 8),
                                             ("firstLSN", 24, 8), ("capacity", 32, 8), ("reserved", 40, 8), ("reservedEnd", 52, 8)]
        let frame: [(String, Int, Int)] = [("salt", 4, 4), ("lsn", 8, 8), ("durableLSN", 16, 8), ("storedBytes", 24, 4),
                                           ("rawBytes", 28, 4), ("batchBytes", 32, 4), ("flags", 36, 1), ("kind", 37, 1),
                                           ("reserved", 38, 2)]
        let meta: [(String, Int, Int)] = [("type", 4, 1), ("reserved5", 5, 1), ("version", 16, 2), ("reserved18", 18, 2),
                                          ("pageBytes", 20, 4), ("generation", 24, 8), ("root", 32, 8), ("freeListHead", 40, 8),
                                          ("checkpointVersion", 48, 8), ("pageCount", 56, 8), ("keyCount", 64, 8),
                                          ("height", 72, 8), ("tail", 80, 8)]
        let page: [(String, Int, Int)] = [("type", 4, 1), ("format", 5, 1), ("count", 6, 2), ("id", 8, 8), ("generation", 16, 8),
                                          ("word", 24, 8), ("hintOffset", 32, 2), ("firstSlot", 0, 2), ("secondSlot", 1, 2)]
        func make(_ structure: Structure, _ list: [(String, Int, Int)]) -> [Field] {
            list.map { Field(structure: structure, name: $0.0, offset: $0.1, width: $0.2) }
        }
        return make(.segmentHeader, segment) + make(.firstFrame, frame) + make(.lastFrame, frame) + make(.metaPage, meta)
            + make(.rootPage, page) + make(.leafPage, page)
    }()

    /// The extreme values of a field `width` bytes wide: 0, 1, the largest and one below it,
    /// and the sign boundary (2^(bits−1), i.e. −1's neighbour as a signed value, and one below).
    public static func extremes(width: Int) -> [UInt64] {
        let bits = 8 * width
        let largest = bits == 64 ? UInt64.max : (UInt64(1) << bits) - 1
        let sign = UInt64(1) << (bits - 1)
        var values: [UInt64] = []
        for value in [0, 1, largest, largest - 1, sign, sign - 1] where !values.contains(value) { values.append(value) }
        return values
    }

    /// Writes `value` (little-endian, `field.width` bytes) into `field` of `image` and reseals
    /// the checksum that covers it. Returns false when the image has no such structure (a
    /// store with an empty tree has no root page).
    @discardableResult
    public static func write(_ value: UInt64, into field: Field, of image: inout StoreImage) -> Bool {
        guard let (path, start) = locate(field.structure, in: image), var bytes = image.files[path],
              start + field.offset + field.width <= bytes.count else { return false }
        let at = field.isSlot ? start + slotOffset(field.offset, of: bytes, at: start) : start + field.offset
        guard at + field.width <= bytes.count else { return false }
        for index in 0..<field.width { bytes[at + index] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(index))) }
        switch field.structure {
        case .segmentHeader:
            store(CRC32C.checksum(bytes[0..<60]), in: &bytes, at: 60)
        case .firstFrame, .lastFrame:
            // The checksum covers the header and the payload its stored length declares,
            // when that fits in the file; else what the frame held before.
            let declared = Int(load32(bytes, start + 24))
            let original = Int(load32(image.files[path]!, start + 24))
            let payload = start + 40 + declared <= bytes.count ? declared : original
            store(CRC32C.checksum(bytes[(start + 4)..<(start + 40 + payload)]), in: &bytes, at: start)
        case .metaPage, .rootPage, .leafPage:
            let pageBytes = pageSize(of: image)
            store(CRC32C.checksum(bytes[(start + 4)..<(start + pageBytes)]), in: &bytes, at: start)
        }
        image.files[path] = bytes
        return true
    }

    /// Appends a segment after the log's last one holding `batches` (batch encodings, any
    /// bytes) as the frames of the LSNs after `lastLSN`, with valid checksums: fragments of
    /// at most 1 MiB, each LZ4-compressed when `compress` and that makes it smaller.
    public static func appendSegment(batches: [[UInt8]], after lastLSN: UInt64, compress: Bool, to image: inout StoreImage) {
        let last = image.lastSegment
        let sequence = last.flatMap { UInt64($0.dropFirst("wal/wal-".count).prefix(16), radix: 16) }.map { $0 + 1 } ?? 1
        let salt: UInt32 = 0x464F_5247
        var body: [UInt8] = []
        for (index, batch) in batches.enumerated() {
            body += frames(of: batch, lsn: lastLSN + 1 + UInt64(index), durable: lastLSN + UInt64(index), salt: salt,
                           compress: compress)
        }
        let size = (WALFormat.segmentHeaderBytes + body.count + 4095) / 4096 * 4096 + 4096
        var segment = segmentHeader(version: WALFormat.version, sequence: sequence, firstLSN: lastLSN + 1, salt: salt,
                                    capacity: UInt64(size)) + body
        segment += [UInt8](repeating: 0, count: size - segment.count)
        let digits = String(sequence, radix: 16)
        image.files["wal/wal-" + String(repeating: "0", count: 16 - digits.count) + digits + ".seg"] = segment
    }

    /// A segment header (FORMAT.md, "Segment header") with these fields, its checksum valid.
    static func segmentHeader(version: UInt16, sequence: UInt64, firstLSN: UInt64, salt: UInt32, capacity: UInt64) -> [UInt8] {
        var header = Array("STRATWAL".utf8) + littleEndian(version) + littleEndian(UInt16(WALFormat.segmentHeaderBytes))
        header += littleEndian(salt) + littleEndian(sequence) + littleEndian(firstLSN) + littleEndian(capacity)
        header += [UInt8](repeating: 0, count: WALFormat.segmentHeaderBytes - 4 - header.count)
        return header + littleEndian(CRC32C.checksum(header))
    }

    /// `batch` as the frames of `lsn`, with valid checksums.
    static func frames(of batch: [UInt8], lsn: UInt64, durable: UInt64, salt: UInt32, compress: Bool) -> [UInt8] {
        var frames: [UInt8] = []
        let pieceBytes = WALFormat.maxFragmentBytes
        let starts = Array(stride(from: 0, to: batch.count, by: pieceBytes))
        for (index, start) in starts.enumerated() {
            let piece = Array(batch[start..<min(batch.count, start + pieceBytes)])
            let kind: UInt8 = starts.count == 1 ? 1 : index == 0 ? 2 : index == starts.count - 1 ? 4 : 3
            let compressed = compress ? LZ4Block.compress(piece) : nil
            let payload = compressed ?? piece
            var fields = littleEndian(salt) + littleEndian(lsn) + littleEndian(durable) + littleEndian(UInt32(payload.count))
            fields += littleEndian(UInt32(piece.count)) + littleEndian(UInt32(batch.count))
            fields += [compressed == nil ? 0 : 1, kind, 0, 0]
            frames += littleEndian(CRC32C.extend(CRC32C.checksum(fields), payload)) + fields + payload
            frames += [UInt8](repeating: 0, count: (8 - frames.count % 8) % 8)
        }
        return frames
    }

    /// The file and offset of `structure` in `image`.
    static func locate(_ structure: Structure, in image: StoreImage) -> (String, Int)? {
        switch structure {
        case .segmentHeader:
            return image.lastSegment.map { ($0, 0) }
        case .firstFrame, .lastFrame:
            guard let path = image.lastSegment, let bytes = image.files[path], bytes.count >= 104 else { return nil }
            let salt = load32(bytes, 12)
            var offset = 64
            var last: Int?
            while offset + 40 <= bytes.count, load32(bytes, offset + 4) == salt, load64(bytes, offset + 8) != 0 {
                let stored = Int(load32(bytes, offset + 24))
                guard stored > 0, offset + 40 + stored <= bytes.count else { break }
                last = offset
                offset += (40 + stored + 7) / 8 * 8
            }
            guard let last else { return nil }
            return (path, structure == .firstFrame ? 64 : last)
        case .metaPage:
            guard let data = image.files["data"] else { return nil }
            let pageBytes = pageSize(of: image)
            guard data.count >= 2 * pageBytes else { return nil }
            return ("data", load64(data, pageBytes + 24) > load64(data, 24) ? pageBytes : 0)
        case .rootPage, .leafPage:
            guard let data = image.files["data"], let (_, metaOffset) = locate(.metaPage, in: image) else { return nil }
            let pageBytes = pageSize(of: image)
            var page = load64(data, metaOffset + 32)
            // Down the leftmost children (a branch's header word) to a leaf, at most 64 levels.
            for _ in 0..<64 {
                guard page != 0, page < UInt64(data.count / pageBytes) else { return nil }
                let offset = Int(page) * pageBytes
                if structure == .rootPage || data[offset + 4] != 2 { return ("data", offset) }
                page = load64(data, offset + 24)
            }
            return nil
        }
    }

    static func pageSize(of image: StoreImage) -> Int {
        guard let data = image.files["data"], data.count >= 24 else { return 4096 }
        let size = Int(load32(data, 20))
        return (4096...65536).contains(size) && size & (size - 1) == 0 ? size : 4096
    }

    /// Where slot `index` of the tree page at `start` lies in it: after the header (2-byte
    /// slots), or after its hint offset (6-byte hinted slots), and in a leaf of format 6,
    /// after its keys' shared prefix too.
    private static func slotOffset(_ index: Int, of bytes: [UInt8], at start: Int) -> Int {
        let format = bytes[start + 5]
        guard format & 2 != 0 else { return 32 + 2 * index }
        let prefix = format & 8 != 0 ? Int(bytes[start + 32]) | Int(bytes[start + 33]) << 8 : 0
        return 34 + prefix + 6 * index
    }

    private static func load32(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        bytes.withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self)) }
    }

    private static func load64(_ bytes: [UInt8], _ offset: Int) -> UInt64 {
        bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
    }

    private static func store<T: FixedWidthInteger>(_ value: T, in bytes: inout [UInt8], at offset: Int) {
        bytes.replaceSubrange(offset..<(offset + MemoryLayout<T>.size), with: littleEndian(value))
    }

    private static func littleEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        withUnsafeBytes(of: value.littleEndian) { Array($0) }
    }
}
