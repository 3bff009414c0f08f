import StrataFileIO
import Testing
@testable import StrataWAL

@Suite struct WALSegmentSizeTests {
    /// Options with uncompressed frames and a first segment of 4 KiB, up to `segmentBytes`.
    private func smallSegments(upTo segmentBytes: Int) -> WALOptions {
        var options = WALOptions(segmentBytes: segmentBytes)
        options.firstSegmentBytes = 4096
        options.compression = false
        return options
    }

    /// Segments start at `firstSegmentBytes` and double while appends go on, up to
    /// `segmentBytes`; a shrunk log starts over at the first size with every older segment
    /// and spare gone, and reopens with its LSNs continuing.
    @Test func segmentsGrowWhileWritesGoOnAndTheLogShrinksBack() throws {
        let fileSystem = SimulatedFileSystem()
        let options = smallSegments(upTo: 32 << 10)
        var (log, _, _) = try openLog(fileSystem, options: options)
        var generator = BatchGenerator(seed: 3)
        for _ in 0..<600 { try log.append(generator.batch(operations: 4, maxValueBytes: 100)) }
        let sizes = try log.segmentPaths.map { try fileSystem.open($0, options: []).size() }
        print("segment sizes: \(sizes)")
        #expect(sizes.count >= 5)
        #expect(Array(sizes.prefix(4)) == [4096, 8192, 16384, 32768])
        #expect(sizes.dropFirst(3).allSatisfy { $0 == 32768 })

        let last = log.writtenLSN
        try log.releaseSegments(through: LSN(last.rawValue - 1))
        #expect(try log.shrink(through: LSN(last.rawValue - 1)) == false, "batches after the LSN are still needed")
        #expect(try log.shrink(through: last))
        let names = try fileSystem.contentsOfDirectory("/db/wal").filter { $0.hasSuffix(".seg") }
        #expect(names.count == 1 && !names[0].contains("spare"), "\(names)")
        #expect(try fileSystem.open(log.segmentPaths[0], options: []).size() == 4096)
        #expect(try log.shrink(through: last) == false, "an empty log without spares is left alone")
        try log.close()

        var records: [WALRecord]
        (log, records, _) = try openLog(fileSystem, options: options)
        #expect(records.isEmpty)
        let next = try log.append(generator.batch())
        #expect(next.rawValue == last.rawValue + 1)
        try log.close()
    }

    /// A small group is written with zeros after it, to 64 KiB past its last page
    /// (`WriteAheadLog.zeroAheadBytes`), so the fdatasyncs of the groups that follow change
    /// no extent of a preallocated file; the next zeros go out only once a group passes
    /// them. A group larger than a quarter of that writes no zeros. Bytes no write
    /// reached are marked here (0xEE) to tell them from zeros written.
    @Test func smallGroupsWriteZerosAheadOfThemselves() throws {
        let fileSystem = SimulatedFileSystem()
        var options = smallSegments(upTo: 1 << 20)
        options.firstSegmentBytes = 256 << 10
        let (log, _, _) = try openLog(fileSystem, options: options)
        let path = log.segmentPaths[0]
        let headerBytes = WALFormat.segmentHeaderBytes
        #expect(fileSystem.modify(path) { bytes in
            for index in headerBytes..<bytes.count { bytes[index] = 0xEE }
        })
        func unwrittenFrom() -> Int {
            let bytes = fileSystem.contents(of: path)!
            return (bytes.lastIndex { $0 != 0xEE } ?? -1) + 1
        }
        var generator = BatchGenerator(seed: 37)
        try log.append(generator.batch(operations: 1, maxValueBytes: 100))
        let firstEnd = log.extent().activeBytes
        let zeroed = (firstEnd + 4095) / 4096 * 4096 + WriteAheadLog.zeroAheadBytes
        #expect(unwrittenFrom() == zeroed)
        #expect(fileSystem.contents(of: path)![firstEnd..<zeroed].allSatisfy { $0 == 0 })
        // Groups inside the zeros write none; the first past them writes the next.
        while log.extent().activeBytes <= zeroed {
            let before = log.extent().activeBytes
            try log.append(generator.batch(operations: 16, maxValueBytes: 200))
            if log.extent().activeBytes <= zeroed { #expect(unwrittenFrom() == zeroed, "a group at \(before) wrote zeros") }
        }
        let secondEnd = log.extent().activeBytes
        let secondZeroed = (secondEnd + 4095) / 4096 * 4096 + WriteAheadLog.zeroAheadBytes
        #expect(unwrittenFrom() == secondZeroed)
        // Laid out in the memory the groups before it used: zeros all the same.
        #expect(fileSystem.contents(of: path)![secondEnd..<secondZeroed].allSatisfy { $0 == 0 })
        // A large group runs past the zeros and writes none of its own.
        let large = WALBatch([.put(key: [1], value: [UInt8](repeating: 7, count: 80 << 10))])
        try log.append(large)
        let largeEnd = log.extent().activeBytes
        #expect(largeEnd > secondZeroed)
        #expect(unwrittenFrom() == largeEnd)
        // The log reads back whole: zeros end it as preallocated space does (the bytes
        // no write reached read as zeros again, as unwritten space does).
        let appended = log.writtenLSN
        try log.close()
        #expect(fileSystem.modify(path) { bytes in
            for index in largeEnd..<bytes.count { bytes[index] = 0 }
        })
        let (reopened, records, report) = try openLog(fileSystem, options: options)
        #expect(records.map(\.lsn.rawValue) == Array(1...appended.rawValue))
        #expect(report.damage.isEmpty, "\(report.damage)")
        try reopened.close()
    }

    /// Frames are padded with zeros to 8 bytes (FORMAT.md, "Frame"), though each group is
    /// laid out in memory an earlier group filled: random bytes first, then frames of
    /// every length modulo 8.
    @Test func framePaddingIsZeroInMemoryEarlierGroupsFilled() throws {
        let fileSystem = SimulatedFileSystem()
        var options = smallSegments(upTo: 1 << 20)
        options.firstSegmentBytes = 512 << 10
        let (log, _, _) = try openLog(fileSystem, options: options)
        var generator = BatchGenerator(seed: 41)
        try log.append(generator.batchOf(bytes: 100 << 10))
        for valueBytes in 130..<146 { try log.append(generator.batchOf(bytes: valueBytes)) }
        let path = log.segmentPaths[0]
        try log.close()
        let (records, _) = try readLog(fileSystem)
        let bytes = try #require(fileSystem.contents(of: path))
        #expect(records.count == 17)
        var paddings = Set<Int>()
        for record in records.dropFirst() {
            let payloadEnd = Int(record.offset) + WALFormat.frameHeaderBytes + record.storedBytes
            let frameEnd = Int(record.offset) + WALFormat.frameBytes(payloadBytes: record.storedBytes)
            paddings.insert(frameEnd - payloadEnd)
            #expect(bytes[payloadEnd..<frameEnd].allSatisfy { $0 == 0 }, "the padding of LSN \(record.lsn.rawValue)")
        }
        #expect(paddings == Set(0..<8))
    }

    /// `rotate(after:)`: the first group after the LSN starts a new segment when the
    /// active one holds only frames at or before it (so a checkpoint through that LSN can
    /// release it), sized after the bytes it used; a segment that already holds later
    /// frames is left alone. The request is spent either way.
    @Test func aRotationRequestStartsANewSegmentOnlyWhenTheActiveOneIsCovered() throws {
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem, options: smallSegments(upTo: 1 << 20))
        var generator = BatchGenerator(seed: 5)
        for _ in 0..<5 { try log.append(generator.batch(operations: 2, maxValueBytes: 100)) }
        let firstPath = log.segmentPaths[0]
        log.rotate(after: LSN(5))
        try log.append(generator.batch())  // LSN 6 starts the new segment
        #expect(log.segmentPaths.count == 2)
        #expect(try log.releaseSegments(through: LSN(5)) == 1 && log.segmentPaths.count == 1 && log.oldestLSN == LSN(6))
        #expect(!fileSystem.fileExists(firstPath))

        // A request through LSN 7 while 6 is the last written: LSN 7's group stays (it is
        // covered), LSN 8's group starts a new segment.
        log.rotate(after: LSN(7))
        try log.append(generator.batch())
        #expect(log.segmentPaths.count == 1)
        try log.append(generator.batch())
        #expect(log.segmentPaths.count == 2 && log.oldestLSN == LSN(6))

        // The segment holds LSN 8 only: a request through 8 rotates before LSN 9. Once it
        // holds 9, a request through 8 has nothing to gain: no rotation, and the request
        // does not linger.
        log.rotate(after: LSN(8))
        try log.append(generator.batch())
        #expect(log.segmentPaths.count == 3)
        log.rotate(after: LSN(8))
        try log.append(generator.batch())
        try log.append(generator.batch())
        #expect(log.segmentPaths.count == 3)
        try log.close()
    }
}
