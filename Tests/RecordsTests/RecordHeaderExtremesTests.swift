import Strata
import Foundation
import Testing

/// Every numeric field of a record's encoding (FORMAT.md, "Record encoding"): the version
/// byte, a keyed value's field count, a name's length, a signed and an unsigned integer, a
/// string's length and an array's count, each set to the extreme values (0, 1, max, max − 1,
/// 2^63, 2^63 − 1 as varints; −1, Int64.min and Int64.max as signed integers): decoding
/// gives the record or a typed error, never a trap, and what decodes holds what was stored.
@Suite struct RecordHeaderExtremesTests {
    struct Sample: Codable, Equatable {
        var small: Int8
        var big: UInt64
        var text: String
        var list: [Int]
    }

    /// A varint (unsigned LEB128) of `value`.
    private static func varint(_ value: UInt64) -> [UInt8] {
        var bytes: [UInt8] = []
        var rest = value
        repeat {
            bytes.append(UInt8(rest & 0x7F) | (rest > 0x7F ? 0x80 : 0))
            rest >>= 7
        } while rest > 0
        return bytes
    }

    private static func zigzag(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }

    /// The record's bytes with `slot` holding `value` (a varint, or the version byte).
    private static func record(slot: String, value: UInt64) -> [UInt8] {
        func field(_ name: String, _ rest: [UInt8]) -> [UInt8] {
            (slot == "name length" && name == "text" ? varint(value) : varint(UInt64(name.utf8.count))) + Array(name.utf8) + rest
        }
        var bytes: [UInt8] = [slot == "version" ? UInt8(truncatingIfNeeded: value) : 1, 9]
        bytes += slot == "field count" ? varint(value) : varint(4)
        bytes += field("small", [3] + (slot == "signed" ? varint(value) : varint(zigzag(-5))))
        bytes += field("big", [4] + (slot == "unsigned" ? varint(value) : varint(7)))
        bytes += field("text", [6] + (slot == "string length" ? varint(value) : varint(2)) + Array("hi".utf8))
        bytes += field("list", [8] + (slot == "array count" ? varint(value) : varint(2)) + [3, 2, 3, 4])
        return bytes
    }

    @Test func extremeValuesInEveryFieldDecodeOrThrowNeverTrap() throws {
        let valid = try RecordDecoder().decode(Sample.self, from: Self.record(slot: "", value: 0))
        #expect(valid == Sample(small: -5, big: 7, text: "hi", list: [1, 2]))
        let unsigned: [UInt64] = [0, 1, .max, .max - 1, 1 << 63, (1 << 63) - 1]
        let signed = [-1, Int64.min, Int64.max, Int64.min + 1, 0, 127, 128, -128, -129].map(Self.zigzag)
        let slots: [(String, [UInt64])] = [
            ("version", [0, 1, 255, 254, 128, 127]), ("field count", unsigned), ("name length", unsigned),
            ("signed", signed + unsigned), ("unsigned", unsigned), ("string length", unsigned), ("array count", unsigned),
        ]
        var decoded = 0, refused = 0
        var kinds: Set<String> = []
        for (slot, values) in slots {
            for value in values {
                do {
                    let sample = try RecordDecoder().decode(Sample.self, from: Self.record(slot: slot, value: value))
                    decoded += 1
                    // Only values the bytes really hold come back.
                    switch slot {
                    case "signed": #expect(Int64(sample.small) == Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1))
                    case "unsigned": #expect(sample.big == value)
                    default: #expect(sample == valid, "\(slot) = \(value) decoded as \(sample)")
                    }
                } catch {
                    refused += 1
                    kinds.insert("\(type(of: error))")
                }
            }
        }
        print("record fields at their extremes: \(decoded) decoded, \(refused) refused (\(kinds.sorted().joined(separator: ", ")))")
        #expect(refused > decoded)
    }
}
