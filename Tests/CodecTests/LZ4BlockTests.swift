import StrataCodec
import StrataFileIO
import Testing

@Suite struct LZ4BlockTests {
    @Test(arguments: [1, 100, 4096, 65_536, 1 << 20])
    func compressibleDataRoundTrips(count: Int) throws {
        let input = (0..<count).map { UInt8(($0 / 7) % 251) }
        guard let compressed = LZ4Block.compress(input) else {
            #expect(count < 16, "repetitive data of \(count) bytes should compress")
            return
        }
        #expect(compressed.count < input.count)
        #expect(try LZ4Block.decompress(compressed, decompressedCount: count) == input)
    }

    @Test func incompressibleDataIsReportedNotGrown() {
        var random = SplitMix64(seed: 7)
        let input = (0..<4096).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        #expect(LZ4Block.compress(input) == nil)
        var output: [UInt8] = [1, 2, 3]
        let appended = input.withUnsafeBytes { LZ4Block.compress($0, appendingTo: &output) }
        #expect(appended == nil)
        #expect(output == [1, 2, 3])
    }

    @Test func wrongDeclaredSizeIsAnError() throws {
        let input = [UInt8](repeating: 65, count: 1000)
        let compressed = try #require(LZ4Block.compress(input))
        #expect(throws: CodecError.self) { try LZ4Block.decompress(compressed, decompressedCount: 999) }
        #expect(throws: CodecError.self) { try LZ4Block.decompress(compressed, decompressedCount: 1001) }
        #expect(throws: CodecError.self) { try LZ4Block.decompress(compressed, decompressedCount: 0) }
        #expect(throws: CodecError.self) { try LZ4Block.decompress([], decompressedCount: 10) }
    }

    @Test func garbageNeverTraps() {
        let seed: UInt64 = 99
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        for _ in 0..<2000 {
            let count = Int(random.next() % 64) + 1
            let garbage = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let expected = Int(random.next() % 4096) + 1
            if let output = try? LZ4Block.decompress(garbage, decompressedCount: expected) {
                #expect(output.count == expected)
            }
        }
    }
}
