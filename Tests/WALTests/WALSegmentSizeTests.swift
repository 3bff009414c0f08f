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
