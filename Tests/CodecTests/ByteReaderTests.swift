import StrataCodec
import Testing

@Suite struct ByteReaderTests {
    @Test(arguments: [UInt64(0), 1, 127, 128, 300, 16_383, 16_384, UInt64(UInt32.max), UInt64.max])
    func varintRoundTrips(value: UInt64) throws {
        var writer = ByteWriter()
        writer.writeVarint(value)
        var reader = ByteReader(writer.bytes)
        #expect(try reader.readVarint() == value)
        #expect(reader.isAtEnd)
    }

    /// One encoding of varints: `ByteWriter.storeVarint` stores the shortest form (seven
    /// bits a byte) and nothing past it, `writeVarint` appends the same bytes, and
    /// `Varint.read` reads the value back from them: at 0, at every power of two and one
    /// below it, and at the largest value.
    @Test func varintsAreCountedStoredAndAppendedAlike() throws {
        var values: [UInt64] = [0, .max]
        for shift in 1..<64 { values += [(1 << UInt64(shift)) - 1, 1 << UInt64(shift)] }
        for value in values {
            var stored = [UInt8](repeating: 0xEE, count: 12)
            var end = 1
            stored.withUnsafeMutableBytes { ByteWriter.storeVarint(value, in: $0, at: &end) }
            #expect(end - 1 == max(1, (64 - value.leadingZeroBitCount + 6) / 7), "varint of \(value)")
            #expect(stored[end] == 0xEE, "varint of \(value) stored past its end")
            var appended = ByteWriter()
            appended.write(UInt8(0x5A))
            appended.writeVarint(value)
            #expect(appended.bytes == [0x5A] + stored[1..<end], "varint of \(value)")
            var offset = 1
            #expect(try appended.bytes.withUnsafeBytes { bytes throws(CodecError) in try Varint.read(bytes, at: &offset) } == value)
            #expect(offset == appended.bytes.count)
        }
    }

    @Test func fixedWidthIntegersAreLittleEndian() throws {
        var writer = ByteWriter()
        writer.write(UInt16(0x0102))
        writer.write(UInt32(0x0304_0506))
        writer.write(UInt64(0x0708_090A_0B0C_0D0E))
        #expect(writer.bytes == [2, 1, 6, 5, 4, 3, 14, 13, 12, 11, 10, 9, 8, 7])
        var reader = ByteReader(writer.bytes)
        #expect(try reader.readUInt16() == 0x0102)
        #expect(try reader.readUInt32() == 0x0304_0506)
        #expect(try reader.readUInt64() == 0x0708_090A_0B0C_0D0E)
    }

    /// Short padding (appended byte by byte) and long runs of zeros (appended as a
    /// collection) both append exactly `count` zeros after what was written.
    @Test(arguments: [0, 1, 7, 16, 17, 4_096])
    func zerosAreAppendedAfterTheBytesWritten(count: Int) {
        var writer = ByteWriter()
        writer.write(UInt8(9))
        writer.writeZeros(count)
        writer.write(UInt8(9))
        #expect(writer.bytes == [9] + [UInt8](repeating: 0, count: count) + [9])
    }

    @Test func readingPastTheEndThrowsWithTheOffset() {
        var reader = ByteReader([1, 2, 3])
        #expect(throws: CodecError.truncated(offset: 0, needed: 4, available: 3)) { try reader.readUInt32() }
        #expect(throws: CodecError.truncated(offset: 0, needed: 5, available: 3)) { try reader.readBytes(count: 5) }
    }

    /// Every two-byte start, followed by bytes that let a three-byte varint end, reads as
    /// one shortest-form varint or is rejected: `Varint.readShort` (in line) and the loop
    /// after it accept exactly the bytes that encoding their value writes again.
    @Test func shortVarintsAreReadInTheirShortestFormOnly() throws {
        for first in UInt8.min...UInt8.max {
            for second in UInt8.min...UInt8.max {
                for third: UInt8 in [0, 1, 0x7F, 0x80] {
                    let bytes: [UInt8] = [first, second, third, 0x01, 0x01]
                    var offset = 0
                    let value = try? bytes.withUnsafeBytes { raw throws(CodecError) in try Varint.read(raw, at: &offset) }
                    guard let value else { continue }
                    var writer = ByteWriter()
                    writer.writeVarint(value)
                    #expect(writer.bytes == Array(bytes[..<offset]), "\(bytes) read as \(value)")
                }
            }
        }
        // And the short forms padded with a zero byte are rejected.
        for padded: [UInt8] in [[0x81, 0x00, 0x01], [0x81, 0x80, 0x00, 0x01]] {
            var offset = 0
            #expect(throws: CodecError.nonShortestVarint(offset: 0)) {
                try padded.withUnsafeBytes { raw throws(CodecError) in try Varint.read(raw, at: &offset) }
            }
        }
    }

    /// A one- or two-byte varint that ends the buffer (a record's last field) is read in
    /// line too; one the end cuts short is left to `Varint.read`, which rejects it.
    @Test func aShortVarintAtTheEndOfTheBytesIsReadInLine() {
        for value: UInt64 in [0, 1, 127, 128, 3_800, 16_383] {
            var writer = ByteWriter()
            writer.writeVarint(value)
            let bytes = writer.bytes
            var offset = 0
            let read = bytes.withUnsafeBytes { Varint.readShort($0, at: &offset, end: $0.count) }
            #expect(read == value && offset == bytes.count, "\(bytes)")
        }
        for cut: [UInt8] in [[0x80], [0x80, 0x80]] {
            var offset = 0
            #expect(cut.withUnsafeBytes { Varint.readShort($0, at: &offset, end: $0.count) } == nil && offset == 0)
            #expect(throws: CodecError.self) { try cut.withUnsafeBytes { raw throws(CodecError) in try Varint.read(raw, at: &offset) } }
        }
    }

    @Test func overlongAndOverflowingVarintsAreRejected() {
        var eleven = ByteReader([UInt8](repeating: 0x80, count: 10) + [0])
        #expect(throws: CodecError.malformedVarint(offset: 0)) { try eleven.readVarint() }
        var overflow = ByteReader([UInt8](repeating: 0xFF, count: 9) + [0x02])
        #expect(throws: CodecError.malformedVarint(offset: 0)) { try overflow.readVarint() }
        var unterminated = ByteReader([0x80, 0x80])
        #expect(throws: CodecError.self) { try unterminated.readVarint() }
    }

    /// Found by fuzzing the log reader: `0x83 0x00` decoded as 3, so a batch with such a
    /// length re-encoded shorter than it was stored. Only the shortest form is accepted.
    @Test(arguments: [[UInt8]([0x83, 0x00]), [0x80, 0x00], [0xFF, 0x80, 0x00]])
    func nonMinimalVarintsAreRejected(bytes: [UInt8]) {
        var reader = ByteReader(bytes)
        #expect(throws: CodecError.nonShortestVarint(offset: 0)) { try reader.readVarint() }
        #expect("\(CodecError.nonShortestVarint(offset: 0))".contains("shortest form"))
    }

    @Test func zeroAndOneByteValuesStillDecode() throws {
        var reader = ByteReader([0x00, 0x7F, 0x80, 0x01])
        #expect(try reader.readVarint() == 0)
        #expect(try reader.readVarint() == 127)
        #expect(try reader.readVarint() == 128)
    }

    @Test func aHostileLengthIsCheckedBeforeAllocating() {
        var writer = ByteWriter()
        writer.writeVarint(1 << 40)
        var reader = ByteReader(writer.bytes)
        #expect(throws: CodecError.self) { try reader.readLength(limit: 1 << 20) }
    }
}
