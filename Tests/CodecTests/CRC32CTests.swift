import StrataCodec
import StrataFileIO
import Testing

@Suite struct CRC32CTests {
    @Test func knownAnswerForTheStandardCheckString() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([UInt8]()) == 0)
        // RFC 3720 B.4: 32 bytes of zeros.
        #expect(CRC32C.checksum([UInt8](repeating: 0, count: 32)) == 0x8A91_36AA)
    }

    /// Checks the hardware path against the software one on slices of random bytes at
    /// every start in `starts` and length in `lengths`, from a random initial CRC.
    private func expectPathsAgree(seed: UInt64, starts: [Int], lengths: [Int]) {
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let bytes = (0..<(starts.max()! + lengths.max()!)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        bytes.withUnsafeBytes { buffer in
            for start in starts {
                for length in lengths {
                    let slice = UnsafeRawBufferPointer(rebasing: buffer[start..<(start + length)])
                    let initial = UInt32(truncatingIfNeeded: random.next())
                    #expect(CRC32C.extend(initial, slice) == CRC32C.extendSoftware(initial, slice), "start \(start) length \(length)")
                }
            }
        }
    }

    @Test func hardwareAndSoftwarePathsAgreeAtEveryLengthAndAlignment() {
        expectPathsAgree(seed: 0xC3C3, starts: Array(0..<9), lengths: Array(stride(from: 0, through: 1000, by: 7)))
    }

    /// Past three blocks the hardware path runs three streams and joins them (256-byte
    /// blocks from 768 bytes, 8 KiB blocks from 24 KiB): every join and remainder agrees.
    @Test func threeStreamPathsAgreeWithTheSoftwarePath() {
        expectPathsAgree(seed: 0x5EED_C3C3, starts: [0, 3, 8],
                         lengths: [767, 768, 769, 775, 1536, 2303, 4092, 4096, 24_575, 24_576, 24_583, 25_344, 49_152, 65_532, 69_990])
    }

    @Test func extendingInPiecesEqualsOneChecksum() {
        let data = Array("The quick brown fox jumps over the lazy dog".utf8)
        let whole = CRC32C.checksum(data)
        for cut in 0...data.count {
            #expect(CRC32C.extend(CRC32C.checksum(data[..<cut]), data[cut...]) == whole)
        }
    }
}
