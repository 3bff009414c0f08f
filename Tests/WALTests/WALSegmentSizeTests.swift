import StrataFileIO
import Testing
@testable import StrataWAL

@Suite struct WALSegmentSizeTests {
    /// Segments start at `firstSegmentBytes` and double while appends go on, up to
    /// `segmentBytes`; a shrunk log starts over at the first size with every older segment
    /// and spare gone, and reopens with its LSNs continuing.
    @Test func segmentsGrowWhileWritesGoOnAndTheLogShrinksBack() throws {
        let fileSystem = SimulatedFileSystem()
        var options = WALOptions(segmentBytes: 32 << 10)
        options.firstSegmentBytes = 4096
        options.compression = false
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
}
