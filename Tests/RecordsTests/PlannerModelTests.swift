import Strata
import StrataTesting
import Foundation
import Testing

/// A record with an index of every kind the planner treats differently: a non-unique
/// integer (sorts through the index), a unique integer, strings with composed and
/// decomposed accents, zero bytes and emoji, doubles with signed zeros, infinities and
/// NaN (an inexact index), a Boolean, an optional string, a compound index (Boolean, then
/// integer) and a unique compound one (string, then integer).
struct Specimen: Record, Equatable {
    var id: Int
    var score: Int
    var code: Int
    var name: String
    var weight: Double
    var flag: Bool
    var tag: String?

    static var indexes: [RecordIndex<Specimen>] {
        [.index(\Specimen.score), .index(\Specimen.code, unique: true), .index(\Specimen.name),
         .index(\Specimen.weight), .index(\Specimen.flag, \Specimen.score), .index(\Specimen.flag), .index(\Specimen.tag),
         .index(\Specimen.name, \Specimen.code, unique: true)]
    }

    static func == (a: Specimen, b: Specimen) -> Bool {
        a.id == b.id && a.score == b.score && a.code == b.code && a.name == b.name
            && a.weight.bitPattern == b.weight.bitPattern && a.flag == b.flag && a.tag == b.tag
    }
}

/// The planner never changes a result: every fetch, count and exists through ids, index
/// ranges, unique entries, pushed-down sorts and limits equals what a scan of every record,
/// `Predicate.evaluate`, an in-memory stable sort, `offset` and `limit` give, in contexts
/// that staged nothing, staged changes, or sit under a parent that did.
@Suite struct PlannerModelTests {
    static let names = ["", "a", "B", "b", "ab", "a\u{0}b", "\u{E9}", "e\u{301}", "f", "\u{FC}", "u\u{308}", "z", "😀"]
    static let weights: [Double] = [-.infinity, -1.5, -0.0, 0.0, 0.5, 2, .infinity, .nan]

    @Test(arguments: [UInt64(11), 22, 33])
    func plannedQueriesEqualAScan(seed: UInt64) throws {
        print("PlannerModelTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        func int(_ range: Range<Int>) -> Int { range.lowerBound + Int(random.next() % UInt64(range.count)) }
        func pick<T>(_ items: [T]) -> T { items[int(0..<items.count)] }
        func specimen(_ id: Int) -> Specimen {
            Specimen(id: id, score: int(0..<12), code: id * 3, name: pick(Self.names), weight: pick(Self.weights),
                     flag: int(0..<2) == 0, tag: int(0..<4) == 0 ? nil : pick(Self.names))
        }
        let store = try Store.inMemory()
        var queries = 0
        var planned: [String: Int] = [:]
        for round in 0..<6 {
            // Some records committed, some staged in a root and a child (the planner reads
            // through overlays too).
            try store.write { unit in
                let repository = unit.repository(Specimen.self)
                for _ in 0..<40 {
                    let id = int(0..<120)
                    if try repository.get(id) != nil, int(0..<3) == 0 { try repository.delete(id) } else { try repository.upsert(specimen(id)) }
                }
            }
            // A context that staged nothing reads the snapshot directly.
            let fresh = store.makeContext()
            let root = store.makeContext()
            let child = try root.makeChild()
            for (context, changes) in [(root, 15), (child, 15)] {
                let repository = context.repository(Specimen.self)
                for _ in 0..<changes {
                    let id = int(0..<130)
                    if try repository.get(id) != nil, int(0..<3) == 0 { try repository.delete(id) } else { try repository.upsert(specimen(id)) }
                }
            }
            for context in [fresh, root, child] {
                let repository = context.repository(Specimen.self)
                let everything = try repository.all()
                #expect(everything.map(\.id) == everything.map(\.id).sorted(), "seed \(seed): all() is in id order")
                for _ in 0..<80 {
                    let (predicate, text) = Self.predicate(score: int(-1..<13), other: int(-1..<13), id: int(-5..<135),
                                                           code: int(-3..<400), name: pick(Self.names), weight: pick(Self.weights),
                                                           tag: int(0..<4) == 0 ? nil : pick(Self.names), shape: int(0..<Self.shapes))
                    let sort: [SortDescriptor<Specimen>] = pick([[], [SortDescriptor(\Specimen.score)],
                                                                 [SortDescriptor(\Specimen.score, order: .reverse)],
                                                                 [SortDescriptor(\Specimen.code, order: .reverse)],
                                                                 [SortDescriptor(\Specimen.id, order: .reverse)]])
                    let limit: Int? = int(0..<3) == 0 ? nil : int(0..<8)
                    let offset = int(0..<3) == 0 ? int(0..<5) : 0
                    var expected = try everything.filter { try predicate.evaluate($0) }
                    let count = expected.count
                    if !sort.isEmpty { expected.sort(using: sort) }
                    expected = Array(expected.dropFirst(offset).prefix(limit ?? .max))
                    let context = "seed \(seed) round \(round) \(text) sort \(sort.map { "\(String(describing: $0.keyPath)) \($0.order)" }) limit \(String(describing: limit)) offset \(offset): \(try repository.explain(predicate, sortBy: sort))"
                    let fetched = try repository.fetch(predicate, sortBy: sort, limit: limit, offset: offset)
                    #expect(fetched == expected, "\(context)\nfetched \(fetched.map(\.id))\nexpected \(expected.map(\.id))")
                    #expect(try repository.count(predicate) == count, "\(context)")
                    // The lazy cursor yields what fetch does, page by page.
                    var cursor = try repository.cursor(predicate, sortBy: sort)
                    var drained: [Specimen] = []
                    while case let page = try cursor.next(3), !page.isEmpty { drained += page }
                    #expect(drained == (try repository.fetch(predicate, sortBy: sort)), "\(context)")
                    // Keyset pages: each page starts after the last record of the one before.
                    var paged: [Specimen] = []
                    let pageSize = int(1..<6)
                    while case let page = try repository.fetch(predicate, sortBy: sort, after: paged.last, limit: pageSize), !page.isEmpty {
                        paged += page
                        if paged.count > drained.count { break }
                    }
                    #expect(paged == drained, "\(context) pages of \(pageSize)")
                    #expect(try repository.exists(predicate) == (count > 0), "\(context)")
                    queries += 1
                    let plan = try repository.explain(predicate, sortBy: sort)
                    let kind = plan.contains("the read is exact") ? "exact" : plan.contains("point lookup") ? "point"
                        : plan.contains("index") ? "index" : plan.contains("key range") ? "range" : "scan"
                    planned[kind + (plan.contains("sorted by reading") ? "+sorted" : ""), default: 0] += 1
                }
            }
            child.discard()
            root.discard()
            fresh.discard()
        }
        print("PlannerModelTests seed \(seed): \(queries) queries, plans \(planned.sorted { $0.key < $1.key })")
        // The property is only as good as the plans it reached.
        #expect(planned.keys.contains { $0.hasPrefix("exact") } && planned.keys.contains("scan") && planned.keys.contains { $0.contains("+sorted") })
    }

    static let shapes = 22

    /// A predicate of one of `shapes` shapes with the given constants, and its text.
    static func predicate(score: Int, other: Int, id: Int, code: Int, name: String, weight: Double, tag: String?,
                          shape: Int) -> (Predicate<Specimen>, String) {
        switch shape {
        case 0: (#Predicate { $0.score == score }, "score == \(score)")
        case 1: (#Predicate { $0.score > score }, "score > \(score)")
        case 2: (#Predicate { $0.score >= score && $0.score < other }, "score >= \(score) && score < \(other)")
        case 3: (#Predicate { score <= $0.score }, "\(score) <= score")
        case 4: (#Predicate { $0.code == code }, "code == \(code)")
        case 5: (#Predicate { $0.code > code && $0.code <= code + 40 }, "code in (\(code), \(code + 40)]")
        case 6: (#Predicate { $0.name == name }, "name == \(name.debugDescription)")
        case 7: (#Predicate { $0.name < name }, "name < \(name.debugDescription)")
        case 8: (#Predicate { $0.weight < weight }, "weight < \(weight)")
        case 9: (#Predicate { $0.weight == weight }, "weight == \(weight)")
        case 10: (#Predicate { $0.flag == true && $0.score < score }, "flag && score < \(score)")
        case 11: (#Predicate { $0.tag == tag }, "tag == \(String(describing: tag))")
        case 12: (#Predicate { $0.id == id }, "id == \(id)")
        case 13: (#Predicate { $0.id >= id && $0.id < id + 30 && $0.score != score }, "id in [\(id), \(id + 30)) && score != \(score)")
        case 14: (#Predicate { $0.score == score || $0.name == name }, "score == \(score) || name == \(name.debugDescription)")
        case 15: (#Predicate { $0.score == score && $0.name >= name }, "score == \(score) && name >= \(name.debugDescription)")
        case 16: (#Predicate { $0.id > id && $0.code == code }, "id > \(id) && code == \(code)")
        case 17: (#Predicate { $0.flag == (score % 2 == 0) }, "flag == \(score % 2 == 0)")
        case 18: (#Predicate { $0.flag == false && $0.score >= score && $0.score <= other }, "!flag && score in [\(score), \(other)]")
        case 19: (#Predicate { $0.name == name && $0.code == code }, "name == \(name.debugDescription) && code == \(code)")
        case 20: (#Predicate { $0.flag == true && $0.name == name }, "flag && name == \(name.debugDescription)")
        default: (#Predicate { _ in true }, "true")
        }
    }
}

/// What `explain` says of exact reads and pushed-down sorts, and that an exact count
/// reads no record: one written as `Gauge` does not decode as `GaugeReading` (a field
/// it lacks), yet counting through `GaugeReading`'s index works where fetching throws.
@Suite struct ExactPlanTests {
    struct Gauge: Record {
        var id: Int
        var level: Int
        static var entityName: String { "Gauge" }
        static var indexes: [RecordIndex<Gauge>] { [.index(\Gauge.level)] }
    }

    struct GaugeReading: Record {
        var id: Int
        var level: Int
        var unit: String
        static var entityName: String { "Gauge" }
        static var indexes: [RecordIndex<GaugeReading>] { [.index(\GaugeReading.level)] }
    }

    @Test func anExactCountReadsOnlyIndexEntries() throws {
        let store = try Store.inMemory()
        try store.write { unit in
            for id in 0..<50 { try unit.repository(Gauge.self).insert(Gauge(id: id, level: id % 5)) }
        }
        do {
            let readings = store.makeContext().repository(GaugeReading.self)
            #expect(try readings.count(#Predicate { $0.level == 3 }) == 10)
            #expect(try readings.count(#Predicate { $0.level >= 1 && $0.level < 3 }) == 20)
            #expect(try readings.count() == 50)
            #expect(try readings.exists(#Predicate { $0.level > 3 }))
            #expect(try readings.exists(#Predicate { $0.level > 4 }) == false)
            #expect(throws: RecordError.self) { try readings.fetch(#Predicate { $0.level == 3 }) }
            // Not exact (a term the index cannot answer): records are read, and fail.
            #expect(throws: RecordError.self) { try readings.count(#Predicate { $0.level == 3 && $0.id != 7 }) }
        }
    }

    @Test func aCursorReadsOnlyWhatItIsAskedFor() throws {
        let store = try Store.inMemory()
        try store.write { unit in
            for id in 0..<5 { try unit.repository(GaugeReading.self).insert(GaugeReading(id: id, level: id * 2, unit: "bar")) }
            for id in 5..<10 { try unit.repository(Gauge.self).insert(Gauge(id: id, level: id * 2)) }
        }
        let readings = store.makeContext().repository(GaugeReading.self)
        #expect(throws: RecordError.self) { try readings.fetch() }
        // In id order and sorted through the level index, the first five decode; the cursor
        // has not touched the rest.
        for sort in [[], [SortDescriptor(\GaugeReading.level)]] {
            var cursor = try readings.cursor(sortBy: sort)
            #expect(try cursor.next(5).map(\.id) == [0, 1, 2, 3, 4])
            #expect(throws: RecordError.self) { try cursor.next() }
        }
    }

    @Test func explainNamesExactReadsAndSortsReadFromAnIndex() throws {
        let store = try Store.inMemory()
        try store.write { unit in
            for id in 0..<20 { try unit.repository(Gauge.self).insert(Gauge(id: id, level: id % 4)) }
        }
        let gauges = store.makeContext().repository(Gauge.self)
        let exact = try gauges.explain(#Predicate { $0.level < 2 })
        #expect(exact == "read: index level where level < 2; no filter: the read is exact", "\(exact)")
        let sorted = try gauges.explain(sortBy: [SortDescriptor(\Gauge.level, order: .reverse)])
        #expect(sorted == "read: index level (every entry); no filter; sorted by reading index level backwards", "\(sorted)")
        let inMemory = try gauges.explain(#Predicate { $0.id > 5 }, sortBy: [SortDescriptor(\Gauge.level)])
        #expect(inMemory.hasSuffix("; sorted in memory"), "\(inMemory)")
        // The pushed-down sort stops after the limit and keeps ties in id order.
        #expect(try gauges.fetch(sortBy: [SortDescriptor(\Gauge.level, order: .reverse)], limit: 6).map(\.id) == [3, 7, 11, 15, 19, 2])
    }
}
