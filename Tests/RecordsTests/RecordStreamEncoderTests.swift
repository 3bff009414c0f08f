import Strata
@testable import StrataRecords
import StrataTesting
import Foundation
import Testing

/// RecordStreamEncoder.S1: the streaming encoder writes exactly the bytes the
/// node tree does, for nested structs, enums with payloads, arrays past 127 elements,
/// dictionaries, optionals and `Data`, and falls back to the tree for values that encode
/// themselves out of order.
@Suite struct RecordStreamEncoderTests {
    enum Shape: Codable, Equatable {
        case point
        case circle(radius: Double)
        case polygon([Int], closed: Bool)
    }

    struct Leaf: Codable, Equatable {
        var name: String
        var tags: [String]
        var blob: Data
        var note: String?
    }

    struct Tree: Codable, Equatable {
        var id: Int
        var small: Int8
        var big: UInt64
        var ratio: Float
        var flag: Bool
        var leaves: [Leaf]
        var shape: Shape
        var scores: [String: Int]
        var nested: [[Int?]]
        var parent: Leaf?
    }

    /// Writes its second field before finishing the first's nested container, then goes
    /// back to it: out of order, so the tree encodes it.
    struct Interleaved: Codable, Equatable {
        var a: [Int]
        var b: String
        enum CodingKeys: String, CodingKey { case a, b }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            var list = container.nestedUnkeyedContainer(forKey: .a)
            try container.encode(b, forKey: .b)
            for value in a { try list.encode(value) }
        }
    }

    /// Encodes one key twice (the tree keeps the last value in the first place).
    struct Twice: Encodable {
        enum CodingKeys: String, CodingKey { case x, y }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(1, forKey: .x)
            try container.encode(2, forKey: .y)
            try container.encode(3, forKey: .x)
        }
    }

    /// Encodes a key twice and swallows the streaming encoder's complaint.
    struct Swallowing: Encodable {
        enum CodingKeys: String, CodingKey { case x, y }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(1, forKey: .x)
            try? container.encode(2, forKey: .x)
            try container.encode(3, forKey: .y)
        }
    }

    /// A subclass that encodes its superclass through a super encoder.
    class Base: Encodable {
        var a = 1
    }

    final class Derived: Base {
        var b = "two"
        enum CodingKeys: String, CodingKey { case b }
        override func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(b, forKey: .b)
            try super.encode(to: container.superEncoder())
        }
    }

    @Test(arguments: [UInt64(5), 6, 7])
    func streamedBytesEqualTheTreesBytes(seed: UInt64) throws {
        print("RecordStreamEncoderTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        func int(_ range: Range<Int>) -> Int { range.lowerBound + Int(random.next() % UInt64(range.count)) }
        let words = ["", "a", "é", "e\u{301}", "日本", "😀", String(repeating: "x", count: 200)]
        func leaf() -> Leaf {
            Leaf(name: words[int(0..<words.count)], tags: (0..<int(0..<4)).map { _ in words[int(0..<words.count)] },
                 blob: Data((0..<int(0..<300)).map { _ in UInt8(truncatingIfNeeded: random.next()) }),
                 note: int(0..<2) == 0 ? nil : words[int(0..<words.count)])
        }
        for round in 0..<200 {
            let shapes: [Shape] = [.point, .circle(radius: Double(int(-5..<5)) / 3), .polygon((0..<int(0..<200)).map { _ in int(-999..<999) }, closed: true)]
            let tree = Tree(id: int(Int.min / 2..<Int.max / 2), small: Int8(int(-128..<128)), big: random.next(),
                            ratio: Float(int(-100..<100)) / 7, flag: int(0..<2) == 0,
                            leaves: (0..<int(0..<(round % 10 == 0 ? 140 : 4))).map { _ in leaf() },
                            shape: shapes[int(0..<3)],
                            scores: Dictionary(uniqueKeysWithValues: (0..<int(0..<5)).map { ("k\($0)", int(0..<99)) }),
                            nested: (0..<int(0..<3)).map { _ in (0..<int(0..<3)).map { _ in int(0..<2) == 0 ? nil : int(0..<9) } },
                            parent: int(0..<2) == 0 ? nil : leaf())
            let streamed = try RecordEncoder().encode(tree)
            #expect(streamed == (try RecordEncoder().encodeThroughTree(tree)), "seed \(seed) round \(round)")
            #expect(try RecordDecoder().decode(Tree.self, from: streamed) == tree)
        }
        for value in [Interleaved(a: [1, 2, 3], b: "x"), Interleaved(a: [], b: "")] {
            let bytes = try RecordEncoder().encode(value)
            #expect(bytes == (try RecordEncoder().encodeThroughTree(value)))
            #expect(try RecordDecoder().decode(Interleaved.self, from: bytes) == value)
        }
        #expect(try RecordEncoder().encode(Twice()) == (try RecordEncoder().encodeThroughTree(Twice())))
        #expect(try RecordEncoder().encode(Swallowing()) == (try RecordEncoder().encodeThroughTree(Swallowing())))
        #expect(try RecordEncoder().encode(Derived()) == (try RecordEncoder().encodeThroughTree(Derived())))
        for primitive in [try RecordEncoder().encode(42), try RecordEncoder().encode("hi"), try RecordEncoder().encode([Int]())] {
            #expect(primitive.first == RecordValue.formatVersion)
        }
        #expect(try RecordEncoder().encode(Optional<Int>.none) == (try RecordEncoder().encodeThroughTree(Optional<Int>.none)))
    }
}
