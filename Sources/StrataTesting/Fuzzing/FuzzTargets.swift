// The bodies of the fuzz targets of Strata's decoders (Fuzz/): each takes arbitrary bytes
// and must return normally: a decoder gives a result or a typed error, never a trap, a
// hang or a huge allocation, and what decodes round-trips. A broken promise stops the
// process with `preconditionFailure` naming it (libFuzzer then keeps the input).
//
// They live here, not in the Fuzz package, so the fuzzers need only this library, and so
// `swift test` replays the saved corpus (Tests/StrataTestingTests/FuzzCorpusTests.swift)
// without a fuzzer build.
import Foundation
import StrataCodec
import StrataEngine
import StrataFileIO
import StrataWAL

/// The decoders' fuzz targets, one function per target, named as in Fuzz/README.md.
public enum FuzzTargets {
    /// The targets by name (the corpus folders' names).
    public static let all: [(name: String, run: @Sendable ([UInt8]) -> Void)] = [
        ("WALFrames", walFrames), ("LZ4Block", lz4Block), ("EnginePage", enginePage),
        ("EngineOpen", engineOpen), ("RecordDecoder", recordDecoder), ("StoreLog", storeLog),
        ("StoreFields", storeFields),
    ]

    // MARK: WALFrames

    /// Byte 0 chooses the mode. Mode 0: the rest is a segment body after a valid header, as
    /// is. Mode 1: the rest is a sequence of (36 header bytes, payload) pieces whose salt and
    /// checksum are fixed here, so the fuzzer reaches decompression, fragments and batch
    /// decoding. The reader must give batches in LSN order or a typed error.
    public static func walFrames(_ input: [UInt8]) {
        guard let mode = input.first else { return }
        let body = mode & 1 == 0 ? Array(input.dropFirst()) : framesWithValidChecksums(input.dropFirst())
        let fileSystem = SimulatedFileSystem()
        do {
            try fileSystem.createDirectory("/wal")
            let file = try fileSystem.open("/wal/wal-0000000000000001.seg", options: [.create, .write])
            try file.write(segmentHeader() + body, at: 0)
        } catch {
            preconditionFailure("the simulated file system failed: \(error)")
        }
        for recoveryMode in [RecoveryMode.strict, .skipCorrupted] {
            var expected = LSN(1)
            _ = try? WriteAheadLog.read(directory: "/wal", fileSystem: fileSystem, mode: recoveryMode) { record in
                precondition(recoveryMode == .skipCorrupted || record.lsn == expected, "batches out of order")
                precondition(record.lsn >= expected, "LSN went backwards")
                // A batch the reader handed over decodes again, to exactly its size.
                let batch = record.batch
                precondition(batch.encoded().count == record.rawBytes, "batch size mismatch")
                precondition(batch.operations.count == record.operationCount, "operation count mismatch")
                expected = record.lsn.next
            }
        }
    }

    private static let salt: UInt32 = 0x5354_5241

    /// The segment header every `walFrames` input follows: format version 1, salt `salt`.
    private static func segmentHeader() -> [UInt8] {
        ForgedStore.segmentHeader(version: 1, sequence: 1, firstLSN: 1, salt: salt, capacity: 4096)
    }

    private static func framesWithValidChecksums(_ input: ArraySlice<UInt8>) -> [UInt8] {
        var body: [UInt8] = []
        var rest = input
        while rest.count >= 36 {
            var fields = Array(rest.prefix(36))
            rest = rest.dropFirst(36)
            fields.replaceSubrange(0..<4, with: littleEndian(salt))
            let declared = fields.withUnsafeBytes { Int(UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: 20, as: UInt32.self))) }
            let payload = Array(rest.prefix(min(declared, rest.count)))
            rest = rest.dropFirst(payload.count)
            let checksum = CRC32C.extend(CRC32C.checksum(fields), payload)
            body += littleEndian(checksum) + fields + payload
            body += [UInt8](repeating: 0, count: (8 - body.count % 8) % 8)
        }
        return body
    }

    // MARK: LZ4Block

    /// Bytes 0–3 little-endian are the declared decompressed size (modulo 1 MiB, plus 1);
    /// the rest is the block. Decompression is bounded and exact; compression round-trips.
    public static func lz4Block(_ input: [UInt8]) {
        guard input.count >= 4 else { return }
        let declared = Int(readUInt32(input, at: 0)) % (1 << 20) + 1
        let block = Array(input.dropFirst(4))
        if let output = try? LZ4Block.decompress(block, decompressedCount: declared) {
            precondition(output.count == declared, "decompressed to the wrong size")
        }
        if let compressed = LZ4Block.compress(block) {
            precondition(compressed.count < block.count, "compression reported a block that is not smaller")
            let restored = try? LZ4Block.decompress(compressed, decompressedCount: block.count)
            precondition(restored == block, "LZ4 round trip lost data")
        }
    }

    // MARK: EnginePage

    private static let pageBytes = 4096

    /// Pages 2 and up of a data file whose meta page is written here (root at page 2,
    /// height and free list from bytes 1 and 2); the page IDs and checksums of pages whose
    /// byte 4 is a page type (2 to 5) are fixed unless byte 0 is odd, so the fuzzer reaches
    /// slot, cell, overflow and free-list decoding.
    /// With byte 0's bit 2 set, a page of type leaf has its bytes from 40 on (up to the
    /// last nonzero one) compressed into a compressed leaf's block (FORMAT.md, "Compressed
    /// leaves"), so the fuzzer reaches the cells an expansion walks. With its bit 3 set, the
    /// file is read from the real file system, through a mapping (where a point read of a
    /// leaf in pieces expands only its piece), instead of the simulated one. With its bit 4
    /// set, the page cache is the smallest there is (16 pages), so that a walk over leaves
    /// whose expansions reach a quarter of it (16 KiB) holds the rest beside the cache
    /// (`PageFile.holdPage(_:caching:)`); the unit tests reach that path for certain.
    /// Open, get, scans both ways (copying and in place), counts (whole, up to a limit, and
    /// with the committed keys in the memtable, which the count steps to through the
    /// tree's leaves), verify, and a commit with its checkpoint (which reads the leaves it
    /// rewrites as the tree writer does, StoredCell.swift) give results or typed errors.
    public static func enginePage(_ input: [UInt8]) {
        guard let fileSystem = enginePageStore(input) else { return }
        guard input[0] & 8 != 0 else { return enginePage(input, path: "/db", fileSystem: fileSystem) }
        // The same data file on the real file system, read through a mapping: there a point
        // read of a compressed leaf in pieces expands the one piece it searches.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-fuzz-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try Data(fileSystem.contents(of: "/db/data") ?? []).write(to: directory.appendingPathComponent("data"))
        } catch {
            preconditionFailure("the temporary directory failed: \(error)")
        }
        enginePage(input, path: directory.path, fileSystem: POSIXFileSystem())
    }

    private static func enginePage(_ input: [UInt8], path: String, fileSystem: any FileSystem) {
        var options = smallOptions()
        if input[0] & 16 != 0 { options.cacheBytes = 0 }
        guard let (engine, _) = try? StorageEngine.open(path: path, fileSystem: fileSystem, options: options) else { return }
        let snapshot = engine.snapshot()
        _ = try? snapshot.get(Array("k".utf8))
        _ = try? snapshot.scan(limit: 100)
        _ = try? snapshot.scan(reverse: true, limit: 100)
        _ = try? snapshot.withValue(forKey: Array("k".utf8)) { $0.byteCount }
        var visited = 0
        try? snapshot.forEach(reverse: input[0] & 2 != 0) { key, value in
            visited += key.byteCount + value.byteCount
            return visited < 1 << 20
        }
        _ = try? snapshot.count()
        _ = try? snapshot.count(KeyRange(from: [input[1]], to: [input[2], input[3]]), limit: Int(input[3]) + 1)
        _ = engine.verify()
        _ = try? engine.commit(WALBatch([.put(key: Array("k".utf8), value: [1]), .put(key: [input[1], input[2]], value: [2])]))
        _ = try? engine.snapshot().count()
        _ = try? engine.snapshot().count(KeyRange(from: [input[2]]), limit: Int(input[1]) + 1)
        do {
            try engine.checkpoint()
        } catch {
            precondition(error is EngineError, "a checkpoint threw an untyped error: \(error)")
        }
        try? engine.close(checkpoint: false)
    }

    /// The store at /db of an `enginePage` input (nil for an input too short to hold one).
    static func enginePageStore(_ input: [UInt8]) -> SimulatedFileSystem? {
        guard input.count >= 4 else { return nil }
        let fixChecksums = input[0] & 1 == 0
        let compressLeaves = input[0] & 4 != 0
        let height = UInt64(input[1] % 4)
        let freeList = input[2] % 8 == 0 ? UInt64(3) : 0
        var pages: [[UInt8]] = []
        var rest = input.dropFirst(3)
        while !rest.isEmpty && pages.count < 6 {
            var page = Array(rest.prefix(pageBytes))
            rest = rest.dropFirst(pageBytes)
            page += [UInt8](repeating: 0, count: pageBytes - page.count)
            if compressLeaves && page[4] == 3 { compressLeaf(&page) }
            // Only pages of a header's type are fixed: an overflow run's pages are a value's
            // bytes alone (FORMAT.md, "Overflow pages"), checked by its leaf cell.
            if fixChecksums && (2...5).contains(page[4]) {
                page.replaceSubrange(8..<16, with: littleEndian(UInt64(pages.count + 2)))
                seal(&page)
            }
            pages.append(page)
        }
        let pageCount = UInt64(2 + pages.count)
        let root: UInt64 = height == 0 ? 0 : 2
        let file = metaPage(generation: 1, root: root, freeList: freeList, height: height, pageCount: pageCount)
            + [UInt8](repeating: 0, count: pageBytes) + pages.flatMap { $0 }
        let fileSystem = SimulatedFileSystem()
        do {
            try fileSystem.createDirectory("/db")
            let handle = try fileSystem.open("/db/data", options: [.create, .write])
            try handle.write(file, at: 0)
        } catch {
            preconditionFailure("the simulated file system failed: \(error)")
        }
        return fileSystem
    }

    /// Makes `page` a compressed leaf whose cells are its bytes from 40 to its last nonzero
    /// one (left alone when they do not compress into the page).
    private static func compressLeaf(_ page: inout [UInt8]) {
        let end = (page.lastIndex { $0 != 0 } ?? 0) + 1
        guard end > 40 else { return }
        let cells = Array(page[40..<end])
        var block = [UInt8](repeating: 0, count: pageBytes - 40)
        let written = cells.withUnsafeBytes { cells in
            block.withUnsafeMutableBytes { LZ4Block.compress(cells, into: $0, acceleration: 1) }
        }
        guard let written else { return }
        page[5] = 7
        page.replaceSubrange(32..<40, with: littleEndian(UInt32(cells.count)) + littleEndian(UInt32(written)))
        page.replaceSubrange(40..<pageBytes, with: block[..<written] + [UInt8](repeating: 0, count: pageBytes - 40 - written))
    }

    private static func seal(_ page: inout [UInt8]) {
        let checksum = CRC32C.checksum(page[4...])
        page.replaceSubrange(0..<4, with: littleEndian(checksum))
    }

    private static func metaPage(generation: UInt64, root: UInt64, freeList: UInt64, height: UInt64, pageCount: UInt64) -> [UInt8] {
        var page = [UInt8](repeating: 0, count: 4) + [1, 0, 0, 0] + Array("STRATADB".utf8) + littleEndian(UInt16(1))
        page += littleEndian(UInt16(0)) + littleEndian(UInt32(pageBytes)) + littleEndian(generation) + littleEndian(root)
        // Checkpoint version 2^40: no entry of the forged pages is newer (FORMAT.md, "Meta
        // pages"), whatever version a seed's cells carry below it.
        page += littleEndian(freeList) + littleEndian(UInt64(1) << 40) + littleEndian(pageCount) + littleEndian(UInt64(0))
        page += littleEndian(height)
        page += [UInt8](repeating: 0, count: pageBytes - page.count)
        seal(&page)
        return page
    }

    // MARK: EngineOpen

    /// A data file and a log segment on the simulated file system (bytes 0–3 little-endian
    /// give the data file's length; the rest after it is the segment). Opening gives a store
    /// or a typed error; a store that opens reads, verifies, takes a commit and closes.
    public static func engineOpen(_ input: [UInt8]) {
        guard input.count >= 4 else { return }
        let body = Array(input.dropFirst(4))
        let split = min(Int(readUInt32(input, at: 0)), body.count)
        let fileSystem = SimulatedFileSystem()
        do {
            try fileSystem.createDirectory("/db/wal")
            let dataFile = try fileSystem.open("/db/data", options: [.create, .write])
            try dataFile.write(Array(body[..<split]), at: 0)
            let segment = try fileSystem.open("/db/wal/wal-0000000000000001.seg", options: [.create, .write])
            try segment.write(Array(body[split...]), at: 0)
        } catch {
            preconditionFailure("the simulated file system failed: \(error)")
        }
        guard let (engine, _) = try? StorageEngine.open(path: "/db", fileSystem: fileSystem, options: smallOptions()) else { return }
        _ = try? engine.snapshot().scan(limit: 50)
        _ = engine.verify()
        _ = try? engine.commit(WALBatch([.put(key: [1], value: [2])]))
        try? engine.close()
    }

    // MARK: RecordDecoder

    /// The many-shaped record the `RecordDecoder` target decodes into (the saved seed
    /// `Fuzz/Corpus/RecordDecoder/seed-record` is one, with two parts and a blob of 1, 2, 3).
    public struct FuzzRecord: Record {
        public enum Kind: String, Codable, Sendable { case a, b }
        public struct Part: Codable, Sendable {
            public var name: String
            public var weight: Double?
            public var flags: [Bool]
        }

        public var id: Int64
        public var title: String
        public var count: UInt32
        public var kind: Kind?
        public var parts: [Part]
        public var blob: Data
        public var nested: [[Int8]]
    }

    /// `FuzzRecord` read field by field through a `RecordReader`, as a repository reads a
    /// `RecordReadable` type.
    public struct FuzzReadRecord: RecordReadable {
        public var id: Int64
        public var title: String
        public var count: UInt32
        public var kind: FuzzRecord.Kind?
        public var parts: [FuzzRecord.Part]
        public var blob: Data
        public var nested: [[Int8]]

        public init(record: borrowing RecordReader) throws {
            id = try record.decode(Int64.self, forKey: "id")
            title = try record.decode(String.self, forKey: "title")
            count = try record.decode(UInt32.self, forKey: "count")
            kind = try record.decodeIfPresent(FuzzRecord.Kind.self, forKey: "kind")
            parts = try record.decode([FuzzRecord.Part].self, forKey: "parts")
            blob = try record.decode(Data.self, forKey: "blob")
            nested = try record.decode([[Int8]].self, forKey: "nested")
        }
    }

    /// Record bytes (FORMAT.md, "Records"): they decode to a record of a many-shaped type or
    /// give a typed error; what decodes re-encodes, decodes and re-encodes to the same bytes
    /// (compared as bytes: a NaN field is not equal to itself). A `RecordReader` reading the
    /// same fields in place gives a typed error too, or the same record.
    public static func recordDecoder(_ bytes: [UInt8]) {
        let read = try? RecordDecoder().decode(reading: FuzzReadRecord.self, from: bytes)
        guard let record = try? RecordDecoder().decode(FuzzRecord.self, from: bytes) else { return }
        guard let again = try? RecordEncoder().encode(record) else { preconditionFailure("a decoded record does not encode") }
        guard let read, (try? RecordEncoder().encode(read)) == again else {
            preconditionFailure("a record that decodes reads otherwise through a RecordReader")
        }
        guard let decodedAgain = try? RecordDecoder().decode(FuzzRecord.self, from: again),
              (try? RecordEncoder().encode(decodedAgain)) == again else {
            preconditionFailure("a decoded record does not round-trip")
        }
    }

    // MARK: StoreLog

    /// A store whose log holds batches built from the input's structure, in frames with
    /// valid checksums, so the fuzzer reaches what a checksum hides: batch encodings no
    /// commit writes (empty keys, keys over 768 bytes, wrong operation counts, unknown
    /// kinds, trailing bytes) and segment headers with any sequence number. Byte 0: flags
    /// (bit 0: the sequence number is bytes 1–8, else 1; bit 1: LZ4-compress payloads;
    /// bit 2: each batch's count is one more than its operations; bit 3: the input's
    /// leftover bytes end the last batch). Then operations of 5 bytes: kind (0 put, 1
    /// delete, 0xFF ends the batch, anything else written as the kind), key length and value
    /// length (2 bytes each). Opening gives a store or a typed error; a store that opens
    /// reads, checkpoints and closes, or fails typed; one that closed reopens and verifies.
    public static func storeLog(_ input: [UInt8]) {
        _ = storeLogOutcome(input)
    }

    /// How a `storeLog` input ended (for tests that check the seeds reach what they aim at).
    enum StoreLogOutcome: Equatable {
        case notAStore
        case refused(String)
        case failedAfterOpening(String)
        case checkpointedAndReopened(keys: Int)
    }

    static func storeLogOutcome(_ input: [UInt8]) -> StoreLogOutcome {
        guard let flags = input.first else { return .notAStore }
        var rest = input.dropFirst()
        var sequence: UInt64 = 1
        if flags & 1 != 0 {
            guard rest.count >= 8 else { return .notAStore }
            sequence = rest.prefix(8).reversed().reduce(0) { $0 << 8 | UInt64($1) }
            rest = rest.dropFirst(8)
        }
        var batches: [[UInt8]] = []
        var operations: [[UInt8]] = []
        var filler: UInt8 = 0
        func bytes(_ count: Int) -> [UInt8] {
            (0..<count).map { index in filler &+ UInt8(truncatingIfNeeded: index &* 31) }
        }
        func endBatch() {
            guard !operations.isEmpty else { return }
            batches.append(littleEndian(UInt32(operations.count + (flags & 4 != 0 ? 1 : 0))) + operations.joined())
            operations = []
        }
        while rest.count >= 5 {
            let fields = Array(rest.prefix(5))
            rest = rest.dropFirst(5)
            if fields[0] == 0xFF { endBatch(); continue }
            filler = fields[1] ^ fields[3]
            let keyCount = Int(fields[1]) | Int(fields[2]) << 8
            let valueCount = Int(fields[3]) | Int(fields[4]) << 8
            var operation = [fields[0] == 0 ? 1 : fields[0] == 1 ? 2 : fields[0]] + varint(keyCount) + bytes(keyCount)
            if fields[0] != 1 { operation += varint(valueCount) + bytes(valueCount) }
            operations.append(operation)
        }
        endBatch()
        if flags & 8 != 0, !rest.isEmpty, !batches.isEmpty { batches[batches.count - 1] += rest }
        guard !batches.isEmpty else { return .notAStore }

        let fileSystem = SimulatedFileSystem()
        do {
            let (engine, _) = try StorageEngine.open(path: "/s", fileSystem: fileSystem)
            try engine.close()
            for name in try fileSystem.contentsOfDirectory("/s/wal") where name.hasSuffix(".seg") {
                try fileSystem.removeFile("/s/wal/" + name)
            }
            var segment = ForgedStore.segmentHeader(version: WALFormat.version, sequence: sequence, firstLSN: 1, salt: salt, capacity: 4096)
            for (index, batch) in batches.enumerated() {
                segment += ForgedStore.frames(of: batch, lsn: UInt64(index + 1), durable: UInt64(index), salt: salt, compress: flags & 2 != 0)
            }
            let digits = String(sequence, radix: 16)
            let file = try fileSystem.open("/s/wal/wal-" + String(repeating: "0", count: 16 - digits.count) + digits + ".seg",
                                           options: [.create, .write])
            try file.write(segment + [UInt8](repeating: 0, count: max(0, 4096 - segment.count)), at: 0)
            try file.close()
        } catch {
            preconditionFailure("setting up the store failed: \(error)")
        }
        let opened: StorageEngine
        do { opened = try StorageEngine.open(path: "/s", fileSystem: fileSystem).engine } catch {
            precondition(error is EngineError, "opening threw an untyped error: \(error)")
            return .refused("\(error)")
        }
        do {
            _ = try opened.snapshot().scan()
            try opened.checkpoint()
            try opened.close()
        } catch {
            precondition(error is EngineError, "reading or checkpointing threw an untyped error: \(error)")
            try? opened.close()
            return .failedAfterOpening("\(error)")
        }
        do {
            let (reopened, _) = try StorageEngine.open(path: "/s", fileSystem: fileSystem)
            precondition(reopened.verify().isValid, "a store that checkpointed and closed does not verify")
            let keys = try reopened.snapshot().scan().count
            try reopened.close()
            return .checkpointedAndReopened(keys: keys)
        } catch {
            preconditionFailure("a store that checkpointed and closed does not reopen: \(error)")
        }
    }

    private static func varint(_ value: Int) -> [UInt8] {
        var writer = ByteWriter(capacity: 10)
        writer.writeVarint(UInt64(value))
        return writer.bytes
    }

    // MARK: Shared

    /// Small log segments and cache: the simulated file system holds every byte in memory.
    private static func smallOptions() -> EngineOptions {
        var options = EngineOptions()
        options.log.segmentBytes = 4096
        options.cacheBytes = 1 << 20
        return options
    }

    private static func littleEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        withUnsafeBytes(of: value.littleEndian) { Array($0) }
    }

    private static func readUInt32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        bytes.withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self)) }
    }
}
