// Reading the record encoding (FORMAT.md, "Record encoding") in place: validation,
// skipping, field tables and primitives at an offset, through a pointer to the bytes. The
// decoder (RecordDecoder.swift) reads nothing that `RecordBytes.validate` has not accepted
// (its RecordDecoder.D1), so after validation the readers here only need their bounds checks to stay
// memory-safe, not to find errors.
//
// Invariants:
//  RecordBytes.B1. Every read checks the bytes that remain before it touches one; a count or length
//      is checked against them before anything is sized from it, so hostile bytes give
//      `RecordError.malformed` naming the offset, never a trap, a hang or a large
//      allocation.
//  RecordBytes.B2. Varints are read in their shortest form only (`Varint`, as every reader of the
//      formats does), so a record has one encoding.
import StrataContexts
import Foundation
import StrataCodec

/// Reads record bytes in place.
enum RecordBytes {
    enum Tag: UInt8 {
        case null = 0, isFalse = 1, isTrue = 2, int = 3, uint = 4, double = 5, string = 6, bytes = 7, array = 8, keyed = 9
    }

    /// Checks `bytes` as `RecordValue.decode` does (version, structure, depth, lengths,
    /// UTF-8, nothing after the value) without building anything; returns the offset of
    /// the root value. Throws `RecordError.malformed` or `.unsupportedVersion`.
    static func validate(_ bytes: [UInt8]) throws(RecordError) -> Int {
        try validateRecord(bytes).root
    }

    /// `validate`, also returning the root's field table when the root is a keyed value:
    /// the one walk that checks its fields also notes where they lie.
    static func validateRecord(_ bytes: [UInt8]) throws(RecordError) -> (root: Int, fields: RecordFields?) {
        try withRecordBytes(bytes) { (raw) throws(RecordError) -> (root: Int, fields: RecordFields?) in
            var scanner = RecordScanner(raw, at: 0)
            let version = try scanner.byte()
            guard version == RecordValue.formatVersion else {
                throw RecordError.unsupportedVersion(found: version, supported: RecordValue.formatVersion)
            }
            var fields: RecordFields?
            if scanner.remaining > 0, raw[1] == Tag.keyed.rawValue {
                fields = try readFields(&scanner, bytes: bytes, link: nil, validating: true)
            } else {
                try scanner.skipValue(depth: 0, validating: true)
            }
            guard scanner.offset == raw.count else { throw .malformed(offset: scanner.offset, reason: "bytes after the record") }
            return (1, fields)
        }
    }

    /// The offset just past the value at `offset` (already validated: RecordDecoder.D1).
    static func end(of offset: Int, in bytes: [UInt8]) throws(RecordError) -> Int {
        try withRecordBytes(bytes) { (raw) throws(RecordError) -> Int in
            var scanner = RecordScanner(raw, at: offset)
            try scanner.skipValue(depth: 0, validating: false)
            return scanner.offset
        }
    }

    static func tag(_ bytes: [UInt8], _ offset: Int) -> Tag {
        // Validated (RecordDecoder.D1): the tag is known.
        Tag(rawValue: bytes[offset]) ?? .null
    }

    /// What kind of value starts at `offset`, for messages.
    static func kind(_ bytes: [UInt8], _ offset: Int) -> String {
        kind(tag(bytes, offset))
    }

    static func kind(_ tag: Tag) -> String {
        switch tag {
        case .null: "nil"
        case .isFalse, .isTrue: "a Boolean"
        case .int, .uint: "an integer"
        case .double: "a floating-point number"
        case .string: "a string"
        case .bytes: "bytes"
        case .array: "an array"
        case .keyed: "a keyed value"
        }
    }

    /// The string at `offset`, or nil when the value there is not one (validated: RecordDecoder.D1).
    static func string(_ bytes: [UInt8], _ offset: Int) -> String? {
        bytes.withUnsafeBytes { string($0, offset) }
    }

    /// `string(_:_:)` over the bytes where they lie.
    @inline(__always)
    static func string(_ raw: UnsafeRawBufferPointer, _ offset: Int) -> String? {
        guard offset < raw.count, raw[offset] == Tag.string.rawValue else { return nil }
        var scanner = RecordScanner(raw, at: offset + 1)
        guard let count = try? scanner.length(), count <= scanner.remaining else { return nil }
        return validatedString(UnsafeRawBufferPointer(rebasing: raw[scanner.offset..<(scanner.offset + count)]))
    }

    /// A string of bytes that validation found to be UTF-8 (RecordDecoder.D1), copied
    /// without checking them again: `String(decoding:as:)` checks every byte a second time
    /// (248 instructions for a string of 24 bytes instead of 295).
    @inline(__always)
    static func validatedString(_ raw: UnsafeRawBufferPointer) -> String {
        if #available(macOS 26, *) {
            return String(copying: UTF8Span(unchecked: raw.assumingMemoryBound(to: UInt8.self).span))
        }
        return String(decoding: raw, as: UTF8.self)
    }

    /// The integer at `offset` as an `I`, or nil when the value there is not an integer or
    /// does not fit (`RecordDecoding.integer` says which, in its error).
    static func integer<I: FixedWidthInteger>(_ bytes: [UInt8], _ offset: Int, as type: I.Type) -> I? {
        bytes.withUnsafeBytes { integer($0, offset, as: type) }
    }

    /// `integer(_:_:as:)` over the bytes where they lie.
    @inline(__always)
    static func integer<I: FixedWidthInteger>(_ raw: UnsafeRawBufferPointer, _ offset: Int, as type: I.Type) -> I? {
        guard offset < raw.count else { return nil }
        var scanner = RecordScanner(raw, at: offset + 1)
        switch raw[offset] {
        case Tag.int.rawValue:
            guard let zigzag = try? scanner.varint() else { return nil }
            return I(exactly: Int64(bitPattern: zigzag >> 1) ^ -Int64(bitPattern: zigzag & 1))
        case Tag.uint.rawValue: return (try? scanner.varint()).flatMap { I(exactly: $0) }
        default: return nil
        }
    }

    /// The signed integer at `offset` when its varint takes one to three bytes (zigzag:
    /// within ±1,048,576, most counts and ids), read in line; nil for anything else, which
    /// `integer(_:_:as:)` reads or rejects. Not generic: the generic reader, specialized,
    /// still called out for the varint and cost 90 instructions an integer.
    @inline(__always)
    static func shortInt(_ raw: UnsafeRawBufferPointer, _ offset: Int) -> Int64? {
        guard offset < raw.count, raw[offset] == Tag.int.rawValue else { return nil }
        var at = offset + 1
        guard let zigzag = Varint.readShort(raw, at: &at, end: raw.count) else { return nil }
        return Int64(bitPattern: zigzag >> 1) ^ -Int64(bitPattern: zigzag & 1)
    }

    /// The length-prefixed bytes (string, bytes) whose tag is at `offset`.
    static func run(_ bytes: [UInt8], _ offset: Int) throws(RecordError) -> Range<Int> {
        try withRecordBytes(bytes) { (raw) throws(RecordError) -> Range<Int> in
            var scanner = RecordScanner(raw, at: offset + 1)
            let count = try scanner.length()
            try scanner.skip(count)
            return (scanner.offset - count)..<scanner.offset
        }
    }

    /// The fields of the keyed value `decoder` reads (validated: RecordDecoder.D1).
    static func fields(_ decoder: RecordDecoding) throws(RecordError) -> RecordFields {
        try withRecordBytes(decoder.bytes) { (raw) throws(RecordError) -> RecordFields in
            var scanner = RecordScanner(raw, at: decoder.offset)
            return try readFields(&scanner, bytes: decoder.bytes, link: decoder.link, validating: false)
        }
    }

    /// Reads the keyed value at the scanner (its tag first) into a field table, checking
    /// names and values as `RecordScanner.skipValue` does when `validating`.
    private static func readFields(_ scanner: inout RecordScanner, bytes: [UInt8], link: CodingPathLink?,
                                   validating: Bool) throws(RecordError) -> RecordFields {
        let offset = scanner.offset
        _ = try scanner.byte()
        let count = try scanner.length(limit: scanner.remaining / 2)
        let table = RecordFields.make(count: count, bytes: bytes, offset: offset, link: link)
        try table.withUnsafeMutablePointers { (header, fields) throws(RecordError) in
            let alike = try readFields(&scanner, count: count, into: fields, validating: validating)
            header.pointee.count = count
            if alike || count > FieldLookup.scanned {
                FieldLookup(raw: scanner.raw, fields: fields, count: count).findDuplicates(&header.pointee.lookup)
            }
        }
        return table
    }

    /// Reads `count` fields (name, then value) at the scanner into `fields`, checking names
    /// and values as `RecordScanner.skipValue` does when `validating`. Returns whether two
    /// names may be alike (then `FieldLookup.findDuplicates` tells).
    static func readFields(_ scanner: inout RecordScanner, count: Int, into fields: UnsafeMutablePointer<RecordField>,
                           validating: Bool) throws(RecordError) -> Bool {
        let raw = scanner.raw
        // One bit per name (of its length and head): two names alike set the same bit,
        // and only then is the table searched for a name written twice.
        var seen: UInt64 = 0
        var alike = false
        for index in 0..<count {
            let field: RecordField
            if let common = scanner.commonField(validating: validating) {
                field = common
            } else {
                let nameOffset = scanner.offset
                let length = try scanner.length()
                let name = scanner.offset..<(scanner.offset + length)
                let head = FieldLookup.head(of: raw, name)
                // A name of up to eight bytes is all in its head: ASCII there needs no more.
                if validating, length > 8 || head & 0x8080_8080_8080_8080 != 0, !isUTF8(raw, name.lowerBound, length) {
                    throw .malformed(offset: nameOffset, reason: "a field name that is not UTF-8")
                }
                try scanner.skip(length)
                field = RecordField(name: name, head: head, value: scanner.offset)
                try scanner.skipFieldValue(validating: validating)
            }
            let bit: UInt64 = 1 << (((field.head &+ UInt64(field.name.count)) &* 0x9E37_79B9_7F4A_7C15) >> 58)
            alike = alike || seen & bit != 0
            seen |= bit
            (fields + index).initialize(to: field)
        }
        return alike
    }

    /// Whether `raw[start..<start + count]` is UTF-8 (ASCII checked a word at a time, the
    /// last word or two half-words overlapping the ones before rather than byte by byte).
    static func isUTF8(_ raw: UnsafeRawBufferPointer, _ start: Int, _ count: Int) -> Bool {
        let end = start + count
        var bits: UInt64 = 0
        if count >= 8 {
            var index = start
            while index < end - 8 {
                bits |= raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                index += 8
            }
            bits |= raw.loadUnaligned(fromByteOffset: end - 8, as: UInt64.self)
        } else if count >= 4 {
            bits = UInt64(raw.loadUnaligned(fromByteOffset: start, as: UInt32.self)
                | raw.loadUnaligned(fromByteOffset: end - 4, as: UInt32.self))
        } else {
            for index in start..<end { bits |= UInt64(raw[index]) }
        }
        return bits & 0x8080_8080_8080_8080 == 0 || String(validating: UnsafeRawBufferPointer(rebasing: raw[start..<end]), as: UTF8.self) != nil
    }
}

/// `body` with a pointer to `bytes`, throwing what it throws.
@inline(__always)
private func withRecordBytes<R>(_ bytes: [UInt8], _ body: (UnsafeRawBufferPointer) throws(RecordError) -> R) throws(RecordError) -> R {
    do {
        return try bytes.withUnsafeBytes { try body($0) }
    } catch {
        // `withUnsafeBytes` rethrows untyped; only `body`'s errors come through.
        throw error as! RecordError
    }
}

/// A cursor over record bytes (RecordBytes.B1, RecordBytes.B2); valid only inside the `withUnsafeBytes` that made it.
struct RecordScanner {
    let raw: UnsafeRawBufferPointer
    private(set) var offset: Int

    init(_ raw: UnsafeRawBufferPointer, at offset: Int) {
        self.raw = raw
        self.offset = offset
    }

    var remaining: Int { raw.count - offset }

    @inline(__always)
    mutating func byte() throws(RecordError) -> UInt8 {
        guard offset < raw.count else { throw truncated(needed: 1) }
        defer { offset += 1 }
        return raw[offset]
    }

    /// An unsigned LEB128 varint of at most 10 bytes in its shortest form (RecordBytes.B2): one
    /// byte here (the length of a name or a string, a small integer: most of them), up to
    /// three through `Varint.readShort`, longer ones and every error through `Varint.read`.
    /// (`readShort`, in another module, was called, not inlined: 27 instructions a varint,
    /// eight varints a record of four fields.)
    @inline(__always)
    mutating func varint() throws(RecordError) -> UInt64 {
        if offset < raw.count, raw[offset] < 0x80 {
            defer { offset += 1 }
            return UInt64(raw[offset])
        }
        if let value = Varint.readShort(raw, at: &offset, end: raw.count) { return value }
        let start = offset
        do {
            return try Varint.read(raw, at: &offset)
        } catch {
            throw malformed(error, at: start)
        }
    }

    /// A varint length or count, checked against `limit` (by default the bytes that remain).
    @inline(__always)
    mutating func length(limit: Int? = nil) throws(RecordError) -> Int {
        let start = offset
        let value = try varint()
        let limit = limit ?? remaining
        guard value <= UInt64(limit) else {
            throw malformed(CodecError.lengthOverLimit(offset: start, value: value, limit: UInt64(limit)), at: start)
        }
        return Int(value)
    }

    @inline(__always)
    mutating func skip(_ count: Int) throws(RecordError) {
        guard count >= 0, count <= remaining else { throw truncated(needed: count) }
        offset += count
    }

    /// The field at the scanner when it has the common shape, moving past it: a name of
    /// at most 127 bytes, then an integer of up to three bytes or a string of at most 127 bytes,
    /// all within the bytes and, when `validating`, UTF-8. Any other field, well formed or
    /// not, gives nil and leaves the scanner where it was, for the general path to read or
    /// to report. (The general path spent about 150 instructions a field, most of them
    /// its offset kept in memory across calls and its overflow checks.)
    @inline(__always)
    mutating func commonField(validating: Bool) -> RecordField? {
        let end = raw.count
        let at = offset
        guard at < end else { return nil }
        let length = Int(raw[at])
        let valueAt = at &+ 1 &+ length
        // The name's length in one byte; the value's tag and its first byte within the bytes.
        guard length < 0x80, valueAt < end &- 1 else { return nil }
        let name = (at &+ 1)..<valueAt
        let head = FieldLookup.head(of: raw, name)
        if validating, length > 8 || head & 0x8080_8080_8080_8080 != 0, !RecordBytes.isUTF8(raw, at &+ 1, length) { return nil }
        let tag = raw[valueAt]
        if tag == RecordBytes.Tag.int.rawValue || tag == RecordBytes.Tag.uint.rawValue {
            // A varint of one to three bytes in its shortest form (RecordBytes.B2): its last
            // byte below 0x80, and not zero unless it is the only one.
            var last = valueAt &+ 1
            if raw[last] >= 0x80 {
                last &+= 1
                guard last < end else { return nil }
                if raw[last] >= 0x80 {
                    last &+= 1
                    guard last < end, raw[last] < 0x80 else { return nil }
                }
                guard raw[last] != 0 else { return nil }
            }
            offset = last &+ 1
        } else if tag == RecordBytes.Tag.string.rawValue {
            // A length of one byte.
            let first = Int(raw[valueAt &+ 1])
            let start = valueAt &+ 2
            guard first < 0x80, first <= end &- start else { return nil }
            if validating, !RecordBytes.isUTF8(raw, start, first) { return nil }
            offset = start &+ first
        } else {
            return nil
        }
        return RecordField(name: name, head: head, value: valueAt)
    }

    /// `skipValue` for a field of a record's root: integers and strings (most fields) here,
    /// anything else through `skipValue`.
    @inline(__always)
    mutating func skipFieldValue(validating: Bool) throws(RecordError) {
        guard offset < raw.count else { return try skipValue(depth: 1, validating: validating) }
        let tag = raw[offset]
        guard tag == RecordBytes.Tag.int.rawValue || tag == RecordBytes.Tag.uint.rawValue || tag == RecordBytes.Tag.string.rawValue else {
            return try skipValue(depth: 1, validating: validating)
        }
        // An integer, or a string's length: one varint read (one copy of its code, in line).
        let tagOffset = offset
        offset += 1
        let value = try varint()
        guard tag == RecordBytes.Tag.string.rawValue else { return }
        guard value <= UInt64(remaining) else {
            throw malformed(CodecError.lengthOverLimit(offset: tagOffset + 1, value: value, limit: UInt64(remaining)), at: tagOffset + 1)
        }
        let count = Int(value)
        if validating, !RecordBytes.isUTF8(raw, offset, count) {
            throw .malformed(offset: tagOffset, reason: "a string that is not UTF-8")
        }
        offset += count
    }

    /// Reads past one value; with `validating`, checks what `RecordValue.decode` checks.
    mutating func skipValue(depth: Int, validating: Bool) throws(RecordError) {
        guard depth < RecordValue.maxDepth else {
            throw .malformed(offset: offset, reason: "nested deeper than \(RecordValue.maxDepth)")
        }
        let tagOffset = offset
        guard let tag = RecordBytes.Tag(rawValue: try byte()) else {
            throw .malformed(offset: tagOffset, reason: "unknown value tag")
        }
        switch tag {
        case .null, .isFalse, .isTrue: return
        case .int, .uint: _ = try varint()
        case .double: try skip(8)
        case .string:
            let count = try length()
            if validating, !RecordBytes.isUTF8(raw, offset, count) {
                throw .malformed(offset: tagOffset, reason: "a string that is not UTF-8")
            }
            offset += count
        case .bytes: offset += try length()
        case .array:
            // Every element takes at least one byte: a larger count cannot be honest.
            let count = try length()
            for _ in 0..<count { try skipValue(depth: depth + 1, validating: validating) }
        case .keyed:
            let count = try length(limit: remaining / 2)
            for _ in 0..<count {
                let nameOffset = offset
                let length = try length()
                if validating, !RecordBytes.isUTF8(raw, offset, length) {
                    throw .malformed(offset: nameOffset, reason: "a field name that is not UTF-8")
                }
                offset += length
                try skipValue(depth: depth + 1, validating: validating)
            }
        }
    }

    private func truncated(needed: Int) -> RecordError {
        malformed(CodecError.truncated(offset: offset, needed: needed, available: remaining), at: offset)
    }

    private func malformed(_ error: CodecError, at offset: Int) -> RecordError {
        .malformed(offset: offset, reason: "\(error)")
    }
}

/// One field of a keyed value: where its name and its value lie.
struct RecordField {
    var name: Range<Int>
    /// The name's first eight bytes (`FieldLookup.head(of:)`).
    var head: UInt64
    var value: Int
}

/// How a field table finds names besides comparing them: its state between lookups.
struct FieldLookupState {
    /// The field after the last one found: containers ask for fields in the order they
    /// were written, so the next field is the first place to look.
    var next = 0
    /// Field positions by name (the last of each name, as RecordDecoder.D2 of the decoder says), for
    /// tables of more than `FieldLookup.scanned` fields.
    var byName: [String: Int]?
    /// Whether a name occurs twice (no encoder writes that): then only the last counts,
    /// so lookups never start at `next`.
    var hasDuplicates = false
}

/// A keyed value's field table where it lies, with the bytes its ranges point into: valid
/// only while their owner keeps both (a `RecordFields`, or a `RecordReader`'s call).
struct FieldLookup {
    /// The most fields looked up by comparing names one by one.
    static let scanned = 16

    let raw: UnsafeRawBufferPointer
    let fields: UnsafeMutablePointer<RecordField>
    let count: Int

    /// Notes names that occur twice, and builds the name table of a large value.
    func findDuplicates(_ state: inout FieldLookupState) {
        guard count > 1 else { return }
        if count <= Self.scanned {
            for later in 1..<count {
                let name = fields[later].name
                for earlier in 0..<later where fields[earlier].head == fields[later].head && fields[earlier].name.count == name.count {
                    if name.count <= 8
                        || memcmp(raw.baseAddress! + fields[earlier].name.lowerBound, raw.baseAddress! + name.lowerBound, name.count) == 0 {
                        state.hasDuplicates = true
                        return
                    }
                }
            }
        } else {
            var byName: [String: Int] = [:]
            byName.reserveCapacity(count)
            for index in 0..<count {
                byName[String(decoding: UnsafeRawBufferPointer(rebasing: raw[fields[index].name]), as: UTF8.self)] = index
            }
            state.hasDuplicates = byName.count < count
            state.byName = byName
        }
    }

    /// Where the value of the field named `name` lies (the last of that name: RecordDecoder.D2), or nil.
    @inline(__always)
    func valueOffset(of name: String, _ state: inout FieldLookupState) -> Int? {
        position(of: name, &state).map { fields[$0].value }
    }

    /// The position of the field named `name` (the last of that name: RecordDecoder.D2), or nil.
    @inline(__always)
    func position(of name: String, _ state: inout FieldLookupState) -> Int? {
        if let found = name.utf8.withContiguousStorageIfAvailable({ position(of: UnsafeRawBufferPointer($0), &state) }) { return found }
        var name = name
        return name.withUTF8 { position(of: UnsafeRawBufferPointer($0), &state) }
    }

    @inline(__always)
    func position(of wanted: UnsafeRawBufferPointer, _ state: inout FieldLookupState) -> Int? {
        let head = Self.head(of: wanted)
        let next = state.next
        func matches(_ field: RecordField) -> Bool {
            guard field.head == head, field.name.count == wanted.count else { return false }
            guard wanted.count > 8 else { return true }
            return memcmp(raw.baseAddress! + field.name.lowerBound + 8, wanted.baseAddress! + 8, wanted.count - 8) == 0
        }
        if next < count, !state.hasDuplicates, matches(fields[next]) {
            state.next = next + 1
            return next
        }
        let found: Int?
        if let byName = state.byName {
            found = byName[String(decoding: wanted, as: UTF8.self)]
        } else {
            var index = count - 1
            while index >= 0, !matches(fields[index]) { index -= 1 }
            found = index >= 0 ? index : nil
        }
        if let found { state.next = found + 1 }
        return found
    }

    /// The first eight bytes of a name (zeros after a shorter one), little-endian: with its
    /// length, enough to tell most names apart without reading them again.
    @inline(__always)
    static func head(of name: UnsafeRawBufferPointer) -> UInt64 {
        guard let base = name.baseAddress else { return 0 }
        let count = name.count
        if count >= 8 { return UInt64(littleEndian: base.loadUnaligned(as: UInt64.self)) }
        if count >= 4 {
            // Two loads of four that overlap when the name is shorter than eight.
            let low = UInt64(UInt32(littleEndian: base.loadUnaligned(as: UInt32.self)))
            let high = UInt64(UInt32(littleEndian: base.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)))
            return low | high << (8 * UInt64(count - 4))
        }
        var head: UInt64 = 0
        for index in 0..<count { head |= UInt64(base.load(fromByteOffset: index, as: UInt8.self)) << (8 * UInt64(index)) }
        return head
    }

    /// The head of the name at `range` of `raw` (within it).
    @inline(__always)
    static func head(of raw: UnsafeRawBufferPointer, _ range: Range<Int>) -> UInt64 {
        let count = range.count
        if range.lowerBound + 8 <= raw.count {
            // One load; the bytes past a shorter name (still inside the buffer) masked off.
            let word = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: range.lowerBound, as: UInt64.self))
            return count >= 8 ? word : word & ((1 << (8 * UInt64(count))) - 1)
        }
        var head: UInt64 = 0
        for index in 0..<min(count, 8) { head |= UInt64(raw[range.lowerBound + index]) << (8 * UInt64(index)) }
        return head
    }
}

/// What a keyed value's field table knows besides its fields.
struct RecordFieldsHeader {
    /// The record's bytes, where the keyed value's tag lies, and its place in the coding
    /// path (what its decoder holds; not the decoder, which may hold this table).
    let bytes: [UInt8]
    let offset: Int
    let link: CodingPathLink?
    var count = 0
    var lookup = FieldLookupState()
}

/// A keyed value's fields, in one allocation.
final class RecordFields: ManagedBuffer<RecordFieldsHeader, RecordField> {
    static func make(count: Int, bytes: [UInt8], offset: Int, link: CodingPathLink?) -> RecordFields {
        unsafeDowncast(create(minimumCapacity: count) { _ in RecordFieldsHeader(bytes: bytes, offset: offset, link: link) },
                       to: RecordFields.self)
    }

    deinit {
        _ = withUnsafeMutablePointers { header, fields in fields.deinitialize(count: header.pointee.count) }
    }

    // The header is read through its pointer: the `header` property would have every
    // access checked for exclusivity at run time.
    var decoder: RecordDecoding {
        withUnsafeMutablePointerToHeader { RecordDecoding(bytes: $0.pointee.bytes, offset: $0.pointee.offset, link: $0.pointee.link) }
    }

    var bytes: [UInt8] { withUnsafeMutablePointerToHeader { $0.pointee.bytes } }

    var count: Int { withUnsafeMutablePointerToHeader { $0.pointee.count } }

    subscript(index: Int) -> RecordField {
        withUnsafeMutablePointers { header, fields in
            precondition(index >= 0 && index < header.pointee.count, "field index out of range")
            return fields[index]
        }
    }

    /// Where the value of the field `name` lies (the last of that name: RecordDecoder.D2), or nil.
    func valueOffset(of name: String) -> Int? {
        position(of: name).map { self[$0].value }
    }

    /// The position of the field named `name` (the last of that name: RecordDecoder.D2), or nil.
    func position(of name: String) -> Int? {
        if let found = name.utf8.withContiguousStorageIfAvailable({ position(of: UnsafeRawBufferPointer($0)) }) { return found }
        var name = name
        return name.withUTF8 { position(of: UnsafeRawBufferPointer($0)) }
    }

    private func position(of wanted: UnsafeRawBufferPointer) -> Int? {
        withUnsafeMutablePointers { header, fields in
            header.pointee.bytes.withUnsafeBytes { raw in
                FieldLookup(raw: raw, fields: fields, count: header.pointee.count).position(of: wanted, &header.pointee.lookup)
            }
        }
    }
}
