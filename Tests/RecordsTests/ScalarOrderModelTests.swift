import Strata
import StrataTesting
import Foundation
import Testing

/// A record with a field of every scalar Strata indexes, each indexed, and compound
/// indexes mixing them.
struct Sample: Record, Equatable {
    var id: Int
    var title: String
    var due: Date
    var price: Double
    var ratio: Float
    var ref: UUID
    var done: Bool
    var blob: Data
    var note: String?
    var rank: Int?
    var at: Date?

    static var indexes: [RecordIndex<Sample>] {
        [.index(\Sample.title), .index(\Sample.due), .index(\Sample.price), .index(\Sample.ratio),
         .index(\Sample.ref, unique: true), .index(\Sample.done), .index(\Sample.blob), .index(\Sample.note),
         .index(\Sample.rank), .index(\Sample.at), .index(\Sample.done, \Sample.due), .index(\Sample.note, \Sample.price),
         .index(\Sample.done, \Sample.title, \Sample.ratio), .index(\Sample.title, \Sample.ref, unique: true)]
    }

    static func == (a: Sample, b: Sample) -> Bool {
        a.id == b.id && a.title == b.title && a.due.timeIntervalSinceReferenceDate.bitPattern == b.due.timeIntervalSinceReferenceDate.bitPattern
            && a.price.bitPattern == b.price.bitPattern && a.ratio.bitPattern == b.ratio.bitPattern && a.ref == b.ref
            && a.done == b.done && a.blob == b.blob && a.note == b.note && a.rank == b.rank
            && a.at?.timeIntervalSinceReferenceDate.bitPattern == b.at?.timeIntervalSinceReferenceDate.bitPattern
    }
}

/// Strata's order of every scalar (IndexableValue.swift), written here from the values'
/// own meaning, not from their index bytes: a sort gives these records in this order
/// whether it is read from an index or done in memory, and every query equals a scan.
enum ScalarOrderModel {
    /// -1, 0 or 1.
    typealias Comparison = (Sample, Sample) -> Int

    static func order<T: Comparable>(_ a: T, _ b: T) -> Int { a < b ? -1 : a == b ? 0 : 1 }

    /// Numbers by value, -0 equal to 0, every NaN equal to every other and last.
    static func number(_ a: Double, _ b: Double) -> Int {
        switch (a.isNaN, b.isNaN) {
        case (true, true): 0
        case (true, false): 1
        case (false, true): -1
        case (false, false): order(a, b)
        }
    }

    /// Strings by the Unicode scalars of their canonical composition.
    static func text(_ a: String, _ b: String) -> Int {
        let (x, y) = (a.precomposedStringWithCanonicalMapping.unicodeScalars.map(\.value),
                      b.precomposedStringWithCanonicalMapping.unicodeScalars.map(\.value))
        return x == y ? 0 : x.lexicographicallyPrecedes(y) ? -1 : 1
    }

    static func bytes(_ a: [UInt8], _ b: [UInt8]) -> Int { a == b ? 0 : a.lexicographicallyPrecedes(b) ? -1 : 1 }

    static func uuid(_ a: UUID, _ b: UUID) -> Int { bytes(withUnsafeBytes(of: a.uuid) { Array($0) }, withUnsafeBytes(of: b.uuid) { Array($0) }) }

    /// nil first.
    static func optional<T>(_ a: T?, _ b: T?, _ wrapped: (T, T) -> Int) -> Int {
        switch (a, b) {
        case (nil, nil): 0
        case (nil, _): -1
        case (_, nil): 1
        case let (a?, b?): wrapped(a, b)
        }
    }

    /// The model's comparison for a sort on `name`.
    static func comparison(_ name: String) -> Comparison {
        switch name {
        case "id": { order($0.id, $1.id) }
        case "title": { text($0.title, $1.title) }
        case "due": { number($0.due.timeIntervalSinceReferenceDate, $1.due.timeIntervalSinceReferenceDate) }
        case "price": { number($0.price, $1.price) }
        case "ratio": { number(Double($0.ratio), Double($1.ratio)) }
        case "ref": { uuid($0.ref, $1.ref) }
        case "note": { optional($0.note, $1.note, text) }
        case "rank": { optional($0.rank, $1.rank, order) }
        default: { optional($0.at?.timeIntervalSinceReferenceDate, $1.at?.timeIntervalSinceReferenceDate, number) }
        }
    }

    /// The records sorted by `sorts` (names and directions), stably from id order.
    static func sorted(_ records: [Sample], by sorts: [(name: String, reverse: Bool)]) -> [Sample] {
        let comparisons = sorts.map { (comparison($0.name), $0.reverse) }
        return records.enumerated().sorted { left, right in
            for (compare, reverse) in comparisons {
                let result = compare(left.element, right.element)
                if result != 0 { return reverse ? result > 0 : result < 0 }
            }
            return left.offset < right.offset
        }.map(\.element)
    }

    static func descriptor(_ name: String, reverse: Bool) -> SortDescriptor<Sample> {
        let order: SortOrder = reverse ? .reverse : .forward
        return switch name {
        case "id": SortDescriptor(\Sample.id, order: order)
        case "title": SortDescriptor(\Sample.title, order: order)
        case "due": SortDescriptor(\Sample.due, order: order)
        case "price": SortDescriptor(\Sample.price, order: order)
        case "ratio": SortDescriptor(\Sample.ratio, order: order)
        case "ref": SortDescriptor(\Sample.ref, order: order)
        case "note": SortDescriptor(\Sample.note, order: order)
        case "rank": SortDescriptor(\Sample.rank, order: order)
        default: SortDescriptor(\Sample.at, order: order)
        }
    }
}

@Suite struct ScalarOrderModelTests {
    static let titles = ["", "a", "B", "b", "ab", "a\u{0}b", "\u{E9}", "e\u{301}", "e\u{301}x", "\u{E9}x", "\u{FC}", "u\u{308}", "z", "😀"]
    static let numbers: [Double] = [-.infinity, -1.5, -0.0, 0.0, 0.5, 2, .infinity, .nan, -.nan, 0.0 / 0.0]
    static let refs = (0..<6).map { UUID(uuid: (UInt8($0) * 40, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, UInt8($0))) }
    static let blobs: [Data] = [Data(), Data([0]), Data([0, 1]), Data([1]), Data([0xFF]), Data([1, 0, 0])]
    static let sortNames = ["id", "title", "due", "price", "ratio", "ref", "note", "rank", "at"]
    /// Sorts an index can serve (each single key path, the compound indexes' tails and
    /// wholes) and some it cannot (mixed directions, orders no index holds).
    static let multiSorts: [[String]] = [["note", "price"], ["title", "ratio"], ["title", "ref"], ["price", "title"],
                                         ["title", "id"], ["due", "rank"], ["rank", "at"]]

    @Test(arguments: [UInt64(41), 42, 43, 44])
    func everyScalarSortsAndQueriesAsTheModelSays(seed: UInt64) throws {
        print("ScalarOrderModelTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        func int(_ range: Range<Int>) -> Int { range.lowerBound + Int(random.next() % UInt64(range.count)) }
        func pick<T>(_ items: [T]) -> T { items[int(0..<items.count)] }
        var usedRefs = Set<UUID>()
        func sample(_ id: Int, ref: UUID?) -> Sample {
            Sample(id: id, title: pick(Self.titles), due: Date(timeIntervalSinceReferenceDate: pick(Self.numbers)),
                   price: pick(Self.numbers), ratio: Float(pick(Self.numbers)),
                   ref: ref ?? UUID(uuid: (UInt8(id % 256), UInt8(id / 256), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)),
                   done: int(0..<2) == 0, blob: pick(Self.blobs), note: int(0..<4) == 0 ? nil : pick(Self.titles),
                   rank: int(0..<3) == 0 ? nil : int(-3..<4), at: int(0..<3) == 0 ? nil : Date(timeIntervalSinceReferenceDate: pick(Self.numbers)))
        }
        let store = try Store.inMemory()
        var steps = 0
        var plans: [String: Int] = [:]
        for round in 0..<5 {
            try store.write { unit in
                let samples = unit.repository(Sample.self)
                for _ in 0..<30 {
                    let id = int(0..<90)
                    if let old = try samples.get(id), int(0..<3) == 0 {
                        try samples.delete(id)
                        usedRefs.remove(old.ref)
                    } else {
                        // A few records take one of six refs (a unique index): only when free.
                        let wanted = int(0..<3) == 0 ? pick(Self.refs) : nil
                        let old = try samples.get(id)
                        let ref = wanted.flatMap { usedRefs.contains($0) && old?.ref != $0 ? nil : $0 }
                        let next = sample(id, ref: ref)
                        let title = try samples.first(#Predicate { $0.title == next.title && $0.ref == next.ref })
                        guard title == nil || title?.id == id else { continue }
                        try samples.upsert(next)
                        if let old { usedRefs.remove(old.ref) }
                        usedRefs.insert(next.ref)
                    }
                }
            }
            let root = store.makeContext()
            let child = try root.makeChild()
            for context in [root, child] {
                let samples = context.repository(Sample.self)
                for _ in 0..<6 {
                    let id = int(90..<110)
                    if try samples.get(id) == nil { try samples.insert(sample(id, ref: nil)) } else { try samples.delete(id) }
                }
            }
            for context in [store.makeContext(), root, child] {
                let samples = context.repository(Sample.self)
                let everything = try samples.all()
                for _ in 0..<60 {
                    let (predicate, text) = Self.predicate(int(0..<Self.shapes), title: pick(Self.titles), number: pick(Self.numbers),
                                                           ref: int(0..<4) == 0 ? pick(Self.refs) : pick(everything.map(\.ref) + Self.refs),
                                                           blob: pick(Self.blobs), note: int(0..<4) == 0 ? nil : pick(Self.titles),
                                                           rank: int(0..<3) == 0 ? nil : int(-3..<4), flag: int(0..<2) == 0)
                    var sorts: [(name: String, reverse: Bool)] = []
                    switch int(0..<4) {
                    case 0: break
                    case 1, 2: sorts = [(pick(Self.sortNames), int(0..<2) == 0)]
                    default:
                        let reverse = int(0..<2) == 0
                        sorts = pick(Self.multiSorts).map { ($0, int(0..<5) == 0 ? !reverse : reverse) }
                    }
                    let descriptors = sorts.map { ScalarOrderModel.descriptor($0.name, reverse: $0.reverse) }
                    let limit: Int? = int(0..<3) == 0 ? nil : int(0..<6)
                    let matching = try everything.filter { try predicate.evaluate($0) }
                    var expected = ScalarOrderModel.sorted(matching, by: sorts)
                    expected = Array(expected.prefix(limit ?? .max))
                    let plan = try samples.explain(predicate, sortBy: descriptors)
                    let where_ = "seed \(seed) round \(round) \(text) sorts \(sorts) limit \(String(describing: limit)): \(plan)"
                    let fetched = try samples.fetch(predicate, sortBy: descriptors, limit: limit)
                    #expect(fetched.map(\.id) == expected.map(\.id), "\(where_)")
                    #expect(try samples.count(predicate) == matching.count, "\(where_)")
                    var cursor = try samples.cursor(predicate, sortBy: descriptors)
                    var drained: [Sample] = []
                    while case let page = try cursor.next(4), !page.isEmpty { drained += page }
                    #expect(drained.map(\.id) == ScalarOrderModel.sorted(matching, by: sorts).map(\.id), "\(where_) (cursor)")
                    var paged: [Sample] = []
                    while case let page = try samples.fetch(predicate, sortBy: descriptors, after: paged.last, limit: 3), !page.isEmpty {
                        paged += page
                        if paged.count > drained.count { break }
                    }
                    #expect(paged.map(\.id) == drained.map(\.id), "\(where_) (pages)")
                    let kind = plan.contains("the read is exact") ? "exact" : plan.contains("index") ? "index" : "other"
                    plans[kind + (plan.contains("sorted by reading") ? "+sorted" : plan.contains("in memory") ? "+memory" : ""), default: 0] += 1
                    steps += 1
                }
            }
            child.discard()
            root.discard()
        }
        print("ScalarOrderModelTests seed \(seed): \(steps) queries, plans \(plans.sorted { $0.key < $1.key })")
        #expect(plans["exact+sorted", default: 0] > 0 && plans["index+sorted", default: 0] + plans["exact+sorted", default: 0] > 20)
        #expect(plans.keys.contains { $0.hasSuffix("+memory") })
    }

    static let shapes = 20

    static func predicate(_ shape: Int, title: String, number: Double, ref: UUID, blob: Data, note: String?, rank: Int?,
                          flag: Bool) -> (Predicate<Sample>, String) {
        let date = Date(timeIntervalSinceReferenceDate: number)
        let float = Float(number)
        return switch shape {
        case 0: (#Predicate { $0.title == title }, "title == \(title.debugDescription)")
        case 1: (#Predicate { $0.title >= title }, "title >= \(title.debugDescription)")
        case 2: (#Predicate { $0.due < date }, "due < \(number)")
        case 3: (#Predicate { $0.due >= date }, "due >= \(number)")
        case 4: (#Predicate { $0.price > number }, "price > \(number)")
        case 5: (#Predicate { $0.price == number }, "price == \(number)")
        case 6: (#Predicate { $0.ratio <= float }, "ratio <= \(float)")
        case 7: (#Predicate { $0.ratio > float && $0.ratio < 1 }, "ratio in (\(float), 1)")
        case 8: (#Predicate { $0.ref == ref }, "ref == \(ref)")
        case 9: (#Predicate { $0.ref > ref }, "ref > \(ref)")
        case 10: (#Predicate { $0.done == flag }, "done == \(flag)")
        case 11: (#Predicate { $0.blob == blob }, "blob == \(Array(blob))")
        case 12: (#Predicate { $0.note == note }, "note == \(String(describing: note))")
        case 13: (#Predicate { $0.rank == rank }, "rank == \(String(describing: rank))")
        case 14: (#Predicate { $0.done == flag && $0.due > date }, "done == \(flag) && due > \(number)")
        case 15: (#Predicate { $0.note == note && $0.price <= number }, "note == \(String(describing: note)) && price <= \(number)")
        case 16: (#Predicate { $0.done == flag && $0.title == title && $0.ratio >= float }, "done, title, ratio >= \(float)")
        case 17: (#Predicate { $0.title == title && $0.ref == ref }, "title, ref")
        case 18: (#Predicate { $0.at == nil }, "at == nil")
        default: (#Predicate { $0.done == flag }, "done == \(flag)")
        }
    }
}
