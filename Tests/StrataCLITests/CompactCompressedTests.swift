import Foundation
import StrataTesting
import Testing

/// `strata compact --compress-leaves`: the copy holds the same keys in a smaller data file
/// whose leaves are compressed, and `stat`, `verify` and `dump` read it.
@Suite struct CompactCompressedTests {
    @Test func compactingWithCompressedLeavesKeepsEveryKeyInFewerPages() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("s.db").path
        do {
            let store = try Store.open(path: path)
            defer { try? store.close() }
            try store.write { unit in
                for index in 0..<4_000 {
                    try unit.context.put(Array("key-\(100_000 + index)".utf8),
                                         Array("value \(index) of a record whose text repeats, repeats, repeats".utf8))
                }
            }
        }
        let raw = try runStrata(["compact", "raw.db", "--store", "s.db"], in: directory)
        #expect(raw.status == 0 && raw.stdout.contains("4000 keys"), "\(raw.stderr)")
        let compressed = try runStrata(["compact", "lz4.db", "--compress-leaves", "--store", "s.db"], in: directory)
        #expect(compressed.status == 0 && compressed.stdout.contains("4000 keys"), "\(compressed.stderr)")
        func dataBytes(_ name: String) throws -> Int {
            try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent("\(name)/data").path)[.size] as? Int ?? 0
        }
        let (rawBytes, compressedBytes) = (try dataBytes("raw.db"), try dataBytes("lz4.db"))
        #expect(compressedBytes * 2 < rawBytes, "\(compressedBytes) against \(rawBytes) bytes")
        let verify = try runStrata(["verify", "lz4.db"], in: directory)
        #expect(verify.status == 0 && verify.stdout.contains("compressed"), "\(verify.stdout)")
        #expect(try runStrata(["dump", "lz4.db"], in: directory).lines == (try runStrata(["dump", "s.db"], in: directory)).lines)
    }
}
