import StrataCodec
import StrataFileIO
import Testing
@testable import StrataWAL

@Suite struct WALRoundTripTests {
    @Test(arguments: [UInt64(1), 2, 3, 4])
    func seededRandomBatchesComeBackInOrder(seed: UInt64) throws {
        print("seed \(seed)")
        let fileSystem = SimulatedFileSystem()
        var generator = BatchGenerator(seed: seed)
        let batches = (0..<200).map { _ in generator.batch() }
        let (log, _, _) = try openLog(fileSystem, options: WALOptions(segmentBytes: 16 << 10))
        for (index, batch) in batches.enumerated() {
            #expect(try log.append(batch) == LSN(UInt64(index + 1)))
        }
        try log.close()
        let (reopened, records, report) = try openLog(fileSystem, options: WALOptions(segmentBytes: 16 << 10))
        #expect(records.map(\.batch) == batches)
        // The in-place walk recovery uses hands out the same operations, kinds included.
        for (record, batch) in zip(records, batches) {
            var walked: [WALBatch.Operation] = []
            record.forEachOperation { kind, key, value in
                switch (kind, value) {
                case let (WALFormat.insertOperation, value?): walked.append(.insert(key: Array(key), value: Array(value)))
                case let (WALFormat.putOperation, value?): walked.append(.put(key: Array(key), value: Array(value)))
                case (WALFormat.deleteOperation, nil): walked.append(.delete(key: Array(key)))
                default: Issue.record("operation kind \(kind) with value \(value.map { Array($0) } as Any)")
                }
            }
            #expect(walked == batch.operations)
        }
        #expect(records.map(\.lsn) == (1...200).map { LSN(UInt64($0)) })
        #expect(report.damage.isEmpty)
        #expect(report.segmentCount > 1, "16 KiB segments must have rotated")
        #expect(try reopened.append(generator.batch()) == LSN(201))
    }

    @Test func edgeBatchesRoundTrip() throws {
        var generator = BatchGenerator(seed: 11)
        let oneMiB = generator.value(1 << 20)
        let batches = [
            WALBatch(),
            WALBatch([.put(key: [1], value: [2])]),
            WALBatch([.put(key: [3], value: [])]),
            WALBatch([.delete(key: [4, 5])]),
            WALBatch([.put(key: [6], value: oneMiB)]),
            WALBatch([.put(key: [7], value: generator.value(100_000, incompressible: true))]),
            // Larger than one frame (fragmented) and than a 64 KiB segment (an oversized segment).
            WALBatch((0..<3).map { .put(key: [8, UInt8($0)], value: generator.value(1 << 20, incompressible: true)) }),
        ]
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem)
        for batch in batches { try log.append(batch) }
        try log.close()
        let (records, report) = try readLog(fileSystem)
        #expect(records.map(\.batch) == batches)
        #expect(records.last!.frameCount == 4, "3 MiB of operations takes 4 fragments of at most 1 MiB")
        #expect(report.damage.isEmpty)
    }

    @Test func compressibleValuesAreStoredCompressedAndIncompressibleOnesRaw() throws {
        var generator = BatchGenerator(seed: 5)
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem)
        var compressible = WALBatch()
        for index in 0..<100 { compressible.put(Array("key-\(index)".utf8), generator.value(100)) }
        try log.append(compressible)
        let afterFirst = log.statistics
        #expect(afterFirst.storedBytes < afterFirst.rawBytes * 7 / 10)
        try log.append(WALBatch([.put(key: [1], value: generator.value(4096, incompressible: true))]))
        let afterSecond = log.statistics
        #expect(afterSecond.storedBytes - afterFirst.storedBytes == afterSecond.rawBytes - afterFirst.rawBytes)
        try log.close()
        #expect(try readLog(fileSystem).0.count == 2)
    }

    @Test func aBatchOverTheLimitIsRefusedAndNothingIsWritten() throws {
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem)
        let huge = WALBatch([.put(key: [1], value: [UInt8](repeating: 0, count: WALFormat.maxBatchBytes))])
        #expect(throws: WALError.self) { try log.append(huge) }
        #expect(try log.append(WALBatch([.delete(key: [1])])) == LSN(1))
    }

    @Test func batchDecodingIsTotal() throws {
        let seed: UInt64 = 77
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        for _ in 0..<500 {
            let encoded = generator.batch().encoded()
            var damaged = encoded
            let position = Int(generator.random.next() % UInt64(damaged.count))
            damaged[position] ^= UInt8(truncatingIfNeeded: generator.random.next() | 1)
            if let batch = try? WALBatch.decode(damaged) {
                #expect(batch.encoded() == damaged)
            }
            #expect(throws: (any Error).self) { try WALBatch.decode(encoded + [0]) }
            #expect(throws: (any Error).self) { try WALBatch.decode(Array(encoded.dropLast())) }
        }
    }

    @Test func anEncodingLocatesItsOperationsAsTheDecoderDoes() throws {
        let seed: UInt64 = 78
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        for round in 0..<300 {
            var batch = generator.batch(maxValueBytes: 300)
            if round % 3 == 0, case let .put(key, value) = batch.operations[0] { batch.operations[0] = .insert(key: key, value: value) }
            try expectEncodingLocatesItsOperations(batch)
        }
        let empty = WALBatch().encoding()
        #expect(empty.bytes == [0, 0, 0, 0] && empty.operationLocations.isEmpty)
    }

    /// Small batches are encoded on the stack and copied, larger ones in place: byte
    /// counts and operation counts on either side of that limit encode alike.
    @Test func batchesEncodeAlikeOnEitherSideOfTheStackLimit() throws {
        let seed: UInt64 = 79
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        var byteCounts = Set<Int>()
        let limit = WALBatch.smallEncodingBytes
        // One put of an 8-byte key and a value of v bytes (128 ≤ v < 16,384) encodes to 16 + v bytes.
        for valueBytes in (limit - 20)...(limit - 12) {
            var batch = WALBatch()
            batch.put(generator.bytes(8), generator.value(valueBytes))
            byteCounts.insert(batch.measure.encodedByteCount)
            try expectEncodingLocatesItsOperations(batch)
        }
        #expect(byteCounts.contains(limit) && byteCounts.contains(limit + 1))
        for operations in 1...(WALBatch.smallEncodingOperations + 8) {
            try expectEncodingLocatesItsOperations(generator.batch(operations: operations, maxValueBytes: 20))
        }
    }

    /// A record read back hands the memtable the very encoding its batch was committed
    /// with (bytes and where each operation lies), whether it took one frame or several:
    /// random batches of puts, inserts and deletes (empty values among them) and batches
    /// larger than a fragment, compressible or not.
    @Test func aRecordReadBackGivesItsBatchsEncoding() throws {
        let seed: UInt64 = 97
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        var batches = (0..<300).map { index in generator.batch(operations: index % 40 + 1, maxValueBytes: index % 3 == 0 ? 0 : 300) }
        for incompressible in [false, true] {
            var batch = WALBatch()
            batch.put(generator.bytes(8), generator.value(WALFormat.maxFragmentBytes * 2 + 100, incompressible: incompressible))
            batch.delete(generator.bytes(12))
            batch.put(generator.bytes(5), [])
            batches.append(batch)
        }
        let fileSystem = SimulatedFileSystem()
        let options = WALOptions(segmentBytes: 8 << 20)
        var (log, _, _) = try openLog(fileSystem, options: options)
        for batch in batches { try log.append(batch) }
        try log.close()
        let records: [WALRecord]
        (log, records, _) = try openLog(fileSystem, options: options)
        try log.close()
        try #require(records.count == batches.count)
        #expect(records.contains { $0.frameCount > 1 } && records.contains { $0.frameCount == 1 })
        for (record, batch) in zip(records, batches) {
            let read = record.encoding, committed = batch.encoding()
            #expect(read.bytes == committed.bytes, "the bytes of \(record.lsn)")
            #expect(read.operationLocations == committed.operationLocations, "the operations of \(record.lsn)")
        }
    }

    /// A one-fragment batch whose compressed worst case fits `EncodedBatch.stackBlockBytes`
    /// is compressed on the stack and copied out; a larger one, and each fragment of a
    /// batch past `WALFormat.maxFragmentBytes`, is compressed into its payloads in place.
    /// Batches on either side of that limit, compressible or not, and batches of several
    /// fragments, are stored compressed exactly when that is smaller and read back whole.
    @Test func batchesCompressAlikeOnEitherSideOfTheStackLimit() throws {
        let seed: UInt64 = 83
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        var batches: [(batch: WALBatch, incompressible: Bool)] = []
        var bounds = Set<Int>()
        // One put of an 8-byte key and a value of v bytes (128 ≤ v < 16,384) encodes to 16 + v bytes.
        for valueBytes in 978...994 {
            for incompressible in [false, true] {
                var batch = WALBatch()
                batch.put(generator.bytes(8), generator.value(valueBytes, incompressible: incompressible))
                bounds.insert(LZ4Block.compressBound(batch.measure.encodedByteCount))
                batches.append((batch, incompressible))
            }
        }
        #expect(bounds.contains(EncodedBatch.stackBlockBytes) && bounds.contains(EncodedBatch.stackBlockBytes + 1))
        for incompressible in [false, true] {
            var batch = WALBatch()
            let count = WALFormat.maxFragmentBytes * 2 + 100
            batch.put(generator.bytes(8), incompressible ? generator.bytes(count) : [UInt8](repeating: 0x5A, count: count))
            batches.append((batch, incompressible))
        }
        for (batch, incompressible) in batches {
            let encoding = batch.encoding()
            let encoded = try EncodedBatch(encoding, compression: true)
            var fragments: [(rawBytes: Int, storedBytes: Int)] = []
            encoded.forEachFragment { fragment, payload in
                #expect(fragment.stored.count == payload.count && fragment.compressed == (payload.count < fragment.rawBytes))
                // The payload decodes to the fragment's bytes of the encoding.
                let start = fragments.reduce(0) { $0 + $1.rawBytes }
                let raw = Array(encoding.bytes[start..<(start + fragment.rawBytes)])
                #expect((fragment.compressed ? try? LZ4Block.decompress(Array(payload), decompressedCount: fragment.rawBytes) : Array(payload)) == raw)
                fragments.append((fragment.rawBytes, payload.count))
            }
            let expectedCount = (encoding.bytes.count + WALFormat.maxFragmentBytes - 1) / WALFormat.maxFragmentBytes
            #expect(fragments.count == expectedCount && fragments.reduce(0) { $0 + $1.rawBytes } == encoding.bytes.count)
            #expect(fragments.allSatisfy { incompressible ? $0.storedBytes == $0.rawBytes : $0.storedBytes < $0.rawBytes },
                    "a batch of \(encoding.bytes.count) bytes stored as \(fragments)")
            #expect(encoded.storedBytes == fragments.reduce(0) { $0 + $1.storedBytes } && encoded.batchBytes == encoding.bytes.count)
        }
        let fileSystem = SimulatedFileSystem()
        let options = WALOptions(segmentBytes: 8 << 20)
        var (log, _, _) = try openLog(fileSystem, options: options)
        for (batch, _) in batches { try log.append(batch) }
        try log.close()
        let records: [WALRecord]
        (log, records, _) = try openLog(fileSystem, options: options)
        #expect(records.map(\.batch) == batches.map(\.batch))
        try log.close()
    }

    /// A batch past `TransientMemory.hugePageThreshold` is compressed into payloads asked
    /// for huge pages, its fragments written one after another in place, and
    /// its frames written a window of `GroupFrames.keptBytes` at a time: a value whose
    /// megabytes alternate between random and repeated bytes gives fragments stored raw
    /// between fragments stored compressed, and each must decode to its bytes of the
    /// encoding and the batch read back whole from the log.
    @Test func aBatchPastTheHugePageThresholdMixesRawAndCompressedFragments() throws {
        let seed: UInt64 = 61
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let megabytes = TransientMemory.hugePageThreshold / (1 << 20) + 2
        var value = [UInt8](repeating: 0, count: megabytes << 20)
        value.withUnsafeMutableBytes { value in
            for megabyte in stride(from: 0, to: megabytes, by: 2) {
                for word in 0..<((1 << 20) / 8) {
                    value.storeBytes(of: random.next(), toByteOffset: (megabyte << 20) + word * 8, as: UInt64.self)
                }
            }
        }
        var batch = WALBatch()
        batch.put([1, 2, 3, 4, 5, 6, 7, 8], value)
        batch.put([9], [UInt8](repeating: 7, count: 100))
        let encoding = batch.encoding()
        #expect(encoding.bytes.count >= TransientMemory.hugePageThreshold)
        let encoded = try EncodedBatch(encoding, compression: true)
        var start = 0, stored = 0, kinds = Set<Bool>()
        encoded.forEachFragment { fragment, payload in
            let raw = Array(encoding.bytes[start..<(start + fragment.rawBytes)])
            let decoded = fragment.compressed ? try? LZ4Block.decompress(Array(payload), decompressedCount: fragment.rawBytes) : Array(payload)
            let decodes = decoded == raw  // compared out of #expect, which would print both
            #expect(decodes, "the fragment at \(start) decodes to its bytes of the encoding")
            #expect(fragment.stored == stored..<(stored + payload.count))
            kinds.insert(fragment.compressed)
            start += fragment.rawBytes
            stored += payload.count
        }
        #expect(kinds == [false, true] && start == encoding.bytes.count && stored == encoded.storedBytes)
        // Its group is written through the leader's kept memory a window at a time, beside
        // the one write of the header of each segment the append starts.
        let fileSystem = SimulatedFileSystem()
        let options = WALOptions(segmentBytes: 64 << 20)
        var (log, _, _) = try openLog(fileSystem, options: options)
        let writesBefore = fileSystem.count(of: .write), segmentsBefore = log.statistics.segmentsStarted
        try log.append(batch)
        // At least one write per window, and at most one more per frame (a header that
        // does not fit the rest of a window is written into the next one).
        let windows = (encoded.frameBytes + GroupFrames.keptBytes - 1) / GroupFrames.keptBytes
        let writes = fileSystem.count(of: .write) - writesBefore - (log.statistics.segmentsStarted - segmentsBefore)
        var frames = 0
        encoded.forEachFragment { _, _ in frames += 1 }
        #expect(windows > 1 && (windows...(windows + frames)).contains(writes), "\(writes) writes for \(windows) windows")
        try log.close()
        let records: [WALRecord]
        (log, records, _) = try openLog(fileSystem, options: options)
        try log.close()
        let readBack = records.map(\.batch) == [batch]
        #expect(readBack, "the batch read back is the batch appended")
    }

    /// The stream writes exactly the batch's encoding, whatever the sizes of the buffers
    /// it is handed (EncodingStream.S1): pieces of one byte, of a few, of thousands, each
    /// cutting operations at every part (kind and key length, key, value length, value).
    @Test func anEncodingStreamWritesTheEncodingInPiecesOfAnySize() {
        let seed: UInt64 = 29
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        for round in 0..<60 {
            var batch = generator.batch(operations: Int(generator.random.next() % 40) + 1, maxValueBytes: 3_000)
            if round % 3 == 0 { batch.put(generator.bytes(WALFormat.maxKeyBytes), generator.value(20_000)) }
            if round % 5 == 0 { batch.put(generator.bytes(1), []) }
            let expected = batch.encoding().bytes
            let largest = [1, 7, 300, 5_000, expected.count + 10][round % 5]
            var stream = WALBatch.EncodingStream()
            var streamed: [UInt8] = []
            batch.operations.withUnsafeBufferPointer { operations in
                while true {
                    let size = Int(generator.random.next() % UInt64(largest)) + 1
                    var piece = [UInt8](repeating: 0, count: size)
                    let written = piece.withUnsafeMutableBytes { stream.write(into: $0, from: operations) }
                    streamed += piece[..<written]
                    // Only the encoding's end leaves a piece short.
                    guard written == size else { break }
                }
            }
            let same = streamed == expected  // compared out of #expect, which would print both
            #expect(same, "round \(round): \(streamed.count) bytes streamed for \(expected.count)")
        }
    }

    /// A batch larger than a frame is encoded into its fragments a fragment at a time
    /// (`EncodedBatch.init(_:measure:compression:)`): the same fragments and payloads as
    /// from its encoding laid out whole, compressed or raw, with compression on or off.
    @Test func aBatchEncodedAFragmentAtATimeStoresWhatItsWholeEncodingWould() throws {
        let seed: UInt64 = 47
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        for (valueBytes, incompressible) in [(65_536, false), (65_536, true), (300_001, false), (3 << 20, true)] {
            var batch = WALBatch()
            while batch.measure.encodedByteCount <= 2 * WALFormat.maxFragmentBytes + 100 {
                let key = generator.bytes(Int(generator.random.next() % 24) + 1)
                batch.operations.append(generator.random.next() % 4 == 0
                    ? .delete(key: key) : .insert(key: key, value: generator.value(valueBytes, incompressible: incompressible)))
            }
            #expect(batch.measure.spansFrames)
            for compression in [true, false] {
                let whole = try EncodedBatch(batch.encoding(), compression: compression)
                let streamed = try EncodedBatch(batch, measure: batch.measure, compression: compression)
                var wholeFragments: [String] = [], streamedFragments: [String] = []
                whole.forEachFragment { wholeFragments.append("\($0.stored) \($0.rawBytes) \($0.compressed) \($0.kind) \(Array($1).hashValue)") }
                streamed.forEachFragment { streamedFragments.append("\($0.stored) \($0.rawBytes) \($0.compressed) \($0.kind) \(Array($1).hashValue)") }
                let samePayloads = whole.payloads == streamed.payloads  // compared out of #expect, which would print both
                #expect(samePayloads && wholeFragments == streamedFragments && whole.batchBytes == streamed.batchBytes,
                        "values of \(valueBytes) bytes, compression \(compression)")
                #expect(wholeFragments.count > 2)
            }
        }
    }

    /// The encoding holds `batch.measure.encodedByteCount` bytes, decodes to `batch`, and
    /// its locations point at each operation's key and value.
    private func expectEncodingLocatesItsOperations(_ batch: WALBatch) throws {
        let encoding = batch.encoding()
        #expect(encoding.bytes.count == batch.measure.encodedByteCount)
        #expect(try WALBatch.decode(encoding.bytes) == batch)
        let located = encoding.operationLocations.map { location in
            WALBatch.Operation(kind: location.kind, key: encoding.bytes.withUnsafeBytes { UnsafeRawBufferPointer(rebasing: $0[location.key]) },
                               value: location.value.map { range in encoding.bytes.withUnsafeBytes { UnsafeRawBufferPointer(rebasing: $0[range]) } })
        }
        #expect(located == batch.operations)
    }

    @Test func appendsInsideTheSegmentChangeNoFileSize() throws {
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem)
        let before = (fileSystem.count(of: .allocate), fileSystem.count(of: .truncate))
        var generator = BatchGenerator(seed: 3)
        for _ in 0..<50 { try log.append(generator.batch()) }
        #expect(log.statistics.segmentsStarted == 1)
        #expect(fileSystem.count(of: .allocate) == before.0)
        #expect(fileSystem.count(of: .truncate) == before.1)
        #expect(fileSystem.contents(of: try firstSegmentPath(fileSystem))?.count == WALOptions().firstSegmentBytes)
    }

    @Test func aSecondOpenOfTheSameLogIsRefused() throws {
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem)
        #expect(throws: FileIOError.locked(path: "/db/wal/wal.lock")) { try openLog(fileSystem) }
        try log.close()
        _ = try openLog(fileSystem)
    }

    @Test func invalidOptionsAreAnErrorThatNamesTheSetting() {
        #expect(throws: WALError.self) {
            try WriteAheadLog.open(directory: "/db/wal", fileSystem: SimulatedFileSystem(),
                                   options: WALOptions(segmentBytes: 100))
        }
        var options = WALOptions()
        options.firstSegmentBytes = 1_000
        #expect {
            try WriteAheadLog.open(directory: "/db/wal", fileSystem: SimulatedFileSystem(), options: options)
        } throws: { error in
            guard case let WALError.invalidOptions(message) = error else { return false }
            return message.contains("firstSegmentBytes")
        }
    }

    @Test func closedLogRefusesAppends() throws {
        let (log, _, _) = try openLog(SimulatedFileSystem())
        try log.close()
        #expect(throws: WALError.self) { try log.append(WALBatch()) }
    }
}

@Suite struct WALSubmitTests {
    @Test func submittedBatchesGetLSNsInSubmitOrderAndOneGroupCommitsThemAll() throws {
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem)
        var generator = BatchGenerator(seed: 31)
        let batches = (0..<5).map { _ in generator.batch() }
        let lsns = try batches.map { try log.submit($0) }
        #expect(lsns == (1...5).map { LSN(UInt64($0)) })
        let syncs = fileSystem.count(of: .syncData)
        try log.waitUntilDone(LSN(5))
        try log.waitUntilDone(LSN(2))
        #expect(fileSystem.count(of: .syncData) - syncs == 1)
        #expect(log.statistics.largestGroup == 5)
        try log.close()
        #expect(try readLog(fileSystem).0.map(\.batch) == batches)
    }

    @Test func waitingForAnLSNThatWasNeverSubmittedIsAnError() throws {
        let (log, _, _) = try openLog(SimulatedFileSystem())
        #expect(throws: WALError.self) { try log.waitUntilDone(LSN(1)) }
    }
}
