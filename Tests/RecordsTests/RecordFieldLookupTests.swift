import Strata
@testable import StrataRecords
import StrataTesting
import Testing

/// RecordBytes.swift's field tables: a keyed container looks first at the field after the
/// last one it found, so fields read in the order they were written are found at once;
/// any other order, fields never read, and names written twice (no encoder does that, but
/// bytes may) still read as the decoder's RecordDecoder.D2 says: the last field of a name counts. The
/// same holds for a `RecordReader`, whose table lies on the stack.
@Suite struct RecordFieldLookupTests {
    /// A record of integer fields, written in the order given (names under 128 bytes,
    /// values under 64, so every length and varint is one byte).
    static func record(_ fields: [(String, Int)]) -> [UInt8] {
        precondition(fields.count < 128)
        var bytes: [UInt8] = [1, 9, UInt8(fields.count)]
        for (name, value) in fields {
            precondition(name.utf8.count < 128 && (0..<64).contains(value))
            bytes += [UInt8(name.utf8.count)] + Array(name.utf8) + [3, UInt8(value * 2)]
        }
        return bytes
    }

    struct Name: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    protocol ReadOrder { static var names: [String] { get } }
    enum Forward: ReadOrder { static var names: [String] { (0..<20).map { "f\($0)" } } }
    enum Backward: ReadOrder { static var names: [String] { Forward.names.reversed() } }
    enum Scattered: ReadOrder { static var names: [String] { [7, 3, 19, 0, 11, 12, 5].map { "f\($0)" } } }
    enum FirstFour: ReadOrder { static var names: [String] { ["f2", "f0", "f3", "f1"] } }
    enum FirstFourInOrder: ReadOrder { static var names: [String] { ["f0", "f1", "f2", "f3"] } }

    /// Reads the fields `Order` names, in that order.
    struct Fields<Order: ReadOrder>: Decodable {
        var values: [String: Int] = [:]
        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Name.self)
            for name in Order.names { values[name] = try container.decode(Int.self, forKey: Name(stringValue: name)) }
        }
    }

    /// The fields `names` names, in that order, read through a `RecordReader`.
    static func read(_ names: [String], from bytes: [UInt8]) throws -> [String: Int] {
        try bytes.withUnsafeBytes { raw in
            try RecordReader.read(raw) { reader in
                var values: [String: Int] = [:]
                for name in names { values[name] = try reader.decode(Int.self, forKey: name) }
                return values
            }
        }
    }

    @Test func fieldsAreFoundInAnyOrderAndAnyNumber() throws {
        for count in [4, 20] {
            let bytes = Self.record((0..<count).map { ("f\($0)", $0 * 3 % 64) })
            func expected(_ names: [String]) -> [String: Int] {
                Dictionary(uniqueKeysWithValues: names.map { ($0, Int($0.dropFirst())! * 3 % 64) })
            }
            if count == 20 {
                #expect(try RecordDecoder().decode(Fields<Forward>.self, from: bytes).values == expected(Forward.names))
                #expect(try RecordDecoder().decode(Fields<Backward>.self, from: bytes).values == expected(Backward.names))
                #expect(try RecordDecoder().decode(Fields<Scattered>.self, from: bytes).values == expected(Scattered.names))
                for names in [Forward.names, Backward.names, Scattered.names] {
                    #expect(try Self.read(names, from: bytes) == expected(names))
                }
            }
            #expect(try Self.read(FirstFour.names, from: bytes) == expected(FirstFour.names))
            #expect(try RecordDecoder().decode(Fields<FirstFour>.self, from: bytes).values == expected(FirstFour.names))
            #expect(try RecordDecoder().decode([String: Int].self, from: bytes) == expected((0..<count).map { "f\($0)" }))
        }
    }

    @Test func aNameWrittenTwiceReadsAsItsLastValue() throws {
        // Few fields (names compared one by one) and many (a table by name).
        for filler in [0, 20] {
            var fields = [("f0", 1), ("f1", 2)]
            fields += (0..<filler).map { ("g\($0)", 9) }
            fields += [("f0", 3), ("f2", 4), ("f3", 5)]
            let bytes = Self.record(fields)
            let expected = ["f0": 3, "f1": 2, "f2": 4, "f3": 5]
            #expect(try RecordDecoder().decode(Fields<FirstFourInOrder>.self, from: bytes).values == expected, "filler \(filler)")
            #expect(try RecordDecoder().decode(Fields<FirstFour>.self, from: bytes).values == expected, "filler \(filler)")
            #expect(try RecordDecoder().decode([String: Int].self, from: bytes)["f0"] == 3, "filler \(filler)")
            #expect(try Self.read(FirstFourInOrder.names, from: bytes) == expected, "filler \(filler)")
            #expect(try Self.read(FirstFour.names, from: bytes) == expected, "filler \(filler)")
        }
    }

    @Test func aMissingFieldIsNamed() throws {
        let bytes = Self.record([("f0", 1), ("f1", 2), ("f3", 4)])
        #expect {
            _ = try RecordDecoder().decode(Fields<FirstFour>.self, from: bytes)
        } throws: { error in
            guard case let DecodingError.keyNotFound(key, _) = error else { return false }
            return key.stringValue == "f2"
        }
        #expect {
            _ = try Self.read(FirstFour.names, from: bytes)
        } throws: { error in
            guard case let DecodingError.keyNotFound(key, _) = error else { return false }
            return key.stringValue == "f2"
        }
    }

    /// Varints of one to three bytes are read in place (longer ones through `Varint`), in
    /// their shortest form only: a value padded with a zero byte is malformed, through the
    /// decoder and a reader alike.
    @Test func varintsAreReadInTheirShortestFormOnly() throws {
        /// A record of an unsigned field `x` whose varint is `varint`, then a nil field `y`
        /// (so the varint is not at the end of the bytes).
        func record(_ varint: [UInt8]) -> [UInt8] { [1, 9, 2, 1, UInt8(ascii: "x"), 4] + varint + [1, UInt8(ascii: "y"), 0] }
        func varint(_ value: UInt64) -> [UInt8] {
            var bytes: [UInt8] = []
            var rest = value
            while rest >= 0x80 {
                bytes.append(UInt8(rest & 0x7F) | 0x80)
                rest >>= 7
            }
            return bytes + [UInt8(rest)]
        }
        struct X: Decodable { var x: UInt64 }
        for value: UInt64 in [0, 1, 127, 128, 300, 16_383, 16_384, 1 << 21 - 1, 1 << 21, 1 << 40, .max] {
            let bytes = record(varint(value))
            #expect(try RecordDecoder().decode(X.self, from: bytes).x == value)
            #expect(try bytes.withUnsafeBytes { raw in try RecordReader.read(raw) { try $0.decode(UInt64.self, forKey: "x") } } == value)
        }
        for padded: [UInt8] in [[0x81, 0x00], [0x81, 0x80, 0x00], [0x80, 0x80, 0x80, 0x00]] {
            let bytes = record(padded)
            #expect(throws: RecordError.self, "\(padded)") { try RecordDecoder().decode(X.self, from: bytes) }
            #expect(throws: RecordError.self, "\(padded)") {
                try bytes.withUnsafeBytes { raw in try RecordReader.read(raw) { try $0.decode(UInt64.self, forKey: "x") } }
            }
        }
    }

    /// A field table reads the common field (a short name, then an integer of up to three
    /// bytes or a short string) on a path of its own and every other through the general
    /// one. Random records with names and values on both sides of each limit (lengths 0–200,
    /// integers of one to ten bytes, ASCII and not, other kinds between them) read back as
    /// written; a change of each of their bytes in turn is accepted or refused by a reader
    /// exactly as the general path accepts or refuses it, with the same error.
    @Test func everyFieldShapeReadsAsWrittenAndBadBytesFailAsTheGeneralPathSays() throws {
        let seed: UInt64 = 0x5EED_F1E1D
        print("RecordFieldLookupTests.everyFieldShape seed \(seed)")
        var random = SplitMix64(seed: seed)
        let lengths = [0, 1, 3, 4, 7, 8, 9, 16, 23, 100, 127, 128, 129, 200]
        func text(_ random: inout SplitMix64) -> String {
            let count = lengths.randomElement(using: &random)!
            let pieces = ["a", "Z", "0", "@", ".", "é", "€", "𝄞"]
            let ascii = Bool.random(using: &random)
            return String((0..<count).map { _ in Character(ascii ? pieces[Int.random(in: 0..<5, using: &random)] : pieces.randomElement(using: &random)!) })
        }
        func integer(_ random: inout SplitMix64) -> UInt64 {
            let bits = Int.random(in: 0...64, using: &random)
            return bits == 64 ? .max : UInt64.random(in: 0..<(1 << UInt64(bits)), using: &random)
        }
        var mutations = 0, refused = 0
        for _ in 0..<200 {
            var fields: [(key: String, value: RecordValue)] = []
            var names = Set<String>()
            for index in 0..<Int.random(in: 0...6, using: &random) {
                var name = text(&random)
                while !names.insert(name).inserted { name += "\(index)" }
                let value: RecordValue = switch Int.random(in: 0..<6, using: &random) {
                case 0: .int(Int64(bitPattern: integer(&random)))
                case 1: .uint(integer(&random))
                case 2, 3: .string(text(&random))
                case 4: .double(Double(bitPattern: integer(&random)))
                default: .array([.string(text(&random)), .null, .string(text(&random))])
                }
                fields.append((name, value))
            }
            let bytes = RecordValue.keyed(fields).encoded()
            try bytes.withUnsafeBytes { raw in
                try RecordReader.read(raw) { reader in
                    for (name, value) in fields {
                        switch value {
                        case let .int(number):
                            #expect(try reader.decode(Int64.self, forKey: name) == number)
                            // `Int` reads short integers in line (`RecordBytes.shortInt`),
                            // the others as `Int64` does.
                            #expect(try reader.decode(Int.self, forKey: name) == Int(exactly: number))
                        case let .uint(number):
                            #expect(try reader.decode(UInt64.self, forKey: name) == number)
                            if let exact = Int(exactly: number) {
                                #expect(try reader.decode(Int.self, forKey: name) == exact)
                            } else {
                                #expect(throws: DecodingError.self) { try reader.decode(Int.self, forKey: name) }
                            }
                        case let .string(string):
                            #expect(try reader.decode(String.self, forKey: name) == string)
                            #expect(throws: DecodingError.self) { try reader.decode(Int.self, forKey: name) }
                        case let .double(number):
                            let read = try reader.decode(Double.self, forKey: name)
                            #expect(read.bitPattern == number.bitPattern || (read.isNaN && number.isNaN))
                        case let .array(elements):
                            let strings = elements.map { element -> String? in if case let .string(string) = element { string } else { nil } }
                            #expect(try reader.decode([String?].self, forKey: name) == strings)
                        default: Issue.record("a value of a kind the test does not write: \(value)")
                        }
                    }
                }
            }
            // Each byte after the root's tag changed in turn: the reader refuses what the
            // validator refuses.
            for at in 2..<bytes.count {
                var changed = bytes
                changed[at] = [0x00, 0x7F, 0x80, 0xFF, changed[at] ^ 0x80, changed[at] &+ 1].randomElement(using: &random)!
                mutations += 1
                let expected = Self.generalCheck(changed)
                do {
                    try changed.withUnsafeBytes { raw in try RecordReader.read(raw) { _ in } }
                    #expect(expected == nil, "byte \(at) of \(bytes) changed: the reader accepted what the validator refused")
                } catch let error as RecordError {
                    refused += 1
                    #expect(error == expected, "byte \(at) of \(bytes) changed")
                }
            }
        }
        #expect(mutations > 10_000 && refused > mutations / 10)
    }

    /// `RecordBytes.isUTF8` (both paths' check of names and strings) answers as
    /// `String(validating:)` for every length up to 24 with a byte of each kind at each
    /// position: a byte its loads left out would pass as ASCII.
    @Test func utf8ChecksAgreeWithTheStandardLibrary() {
        for count in 0...24 {
            for position in 0..<max(count, 1) {
                for byte: UInt8 in [0x41, 0x7F, 0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0xFF] {
                    var run = [UInt8](repeating: 0x61, count: count)
                    if count > 0 { run[position] = byte }
                    let expected = String(validating: run, as: UTF8.self) != nil
                    // The run at the end of its buffer, and inside one.
                    for buffer in [[0x62] + run, [0x62] + run + [0x62, 0x62]] {
                        buffer.withUnsafeBytes { raw in
                            #expect(RecordBytes.isUTF8(raw, 1, count) == expected, "\(run)")
                        }
                    }
                }
            }
        }
    }

    /// What the general path (`RecordScanner.skipValue`, validating) finds wrong with a
    /// record, or nil: the oracle for the field tables, which read common fields their own way.
    static func generalCheck(_ bytes: [UInt8]) -> RecordError? {
        bytes.withUnsafeBytes { (raw) -> RecordError? in
            var scanner = RecordScanner(raw, at: 1)
            do throws(RecordError) {
                try scanner.skipValue(depth: 0, validating: true)
            } catch {
                return error
            }
            return scanner.offset == raw.count ? nil : RecordError.malformed(offset: scanner.offset, reason: "bytes after the record")
        }
    }

    /// `init(from:)` takes `any Decoder`: a decoder of more than three words would be
    /// boxed on the heap for every value decoded.
    @Test func aDecoderFitsAnExistentialsInlineBuffer() {
        #expect(MemoryLayout<RecordDecoding>.size <= 3 * MemoryLayout<Int>.size)
    }
}
