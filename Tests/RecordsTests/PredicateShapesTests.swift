import Strata
@testable import StrataRecords
import Foundation
import TestBackends
import Testing

/// PredicateShapes.swift: the terms read by closures compiled once per expression type
/// are the terms of each predicate, with its own constants, and a conjunct that is not a
/// comparison of the input's key path with a constant counts without becoming a term.
@Suite struct PredicateShapesTests {
    struct Item: Codable {
        var id: Int
        var count: Int
        var name: String
        var flag: Bool
        var other: Int
    }

    /// One place in the source, so one expression type, whatever the constant.
    static func countAbove(_ bound: Int) -> Predicate<Item> { #Predicate<Item> { $0.count > bound } }

    static func rendered(_ terms: PredicateTerms) -> [String] {
        terms.terms.map { "\($0.keyPath) \($0.op.symbol) \($0.constant)" }
    }

    @Test func everyPredicateOfOneTypeGetsItsOwnConstants() {
        for bound in [3, -7, 12, 3] {
            let terms = PredicateShapes.terms(of: Self.countAbove(bound))
            #expect(Self.rendered(terms) == ["\\Item.count > \(bound)"])
            #expect(terms.conjuncts == 1)
        }
    }

    @Test func eachOperatorEitherSideFirst() {
        let limit = 9
        let cases: [(Predicate<Item>, String)] = [
            (#Predicate<Item> { $0.count == limit }, "=="), (#Predicate<Item> { $0.count < limit }, "<"),
            (#Predicate<Item> { $0.count <= limit }, "<="), (#Predicate<Item> { $0.count >= limit }, ">="),
            (#Predicate<Item> { limit == $0.count }, "=="), (#Predicate<Item> { limit < $0.count }, ">"),
            (#Predicate<Item> { limit <= $0.count }, ">="), (#Predicate<Item> { limit > $0.count }, "<"),
            (#Predicate<Item> { limit >= $0.count }, "<="),
        ]
        for (predicate, op) in cases {
            #expect(Self.rendered(PredicateShapes.terms(of: predicate)) == ["\\Item.count \(op) 9"])
        }
    }

    @Test func conjunctionsAreLookedThroughAndOtherConjunctsCounted() {
        let name = "kite"
        let mixed = #Predicate<Item> { $0.count > 1 && $0.name.count > 2 && $0.name == name && $0.flag == true }
        let terms = PredicateShapes.terms(of: mixed)
        #expect(Self.rendered(terms) == ["\\Item.count > 1", "\\Item.name == kite", "\\Item.flag == true"])
        #expect(terms.conjuncts == 4)

        // A disjunction, two key paths compared, a negation: one conjunct each, no term.
        let opaque: [Predicate<Item>] = [
            #Predicate<Item> { $0.count == 1 || $0.count == 2 },
            #Predicate<Item> { $0.count == $0.other },
            #Predicate<Item> { !($0.count == 1) },
        ]
        for predicate in opaque {
            let read = PredicateShapes.terms(of: predicate)
            #expect(read.terms.isEmpty)
            #expect(read.conjuncts == 1)
        }
    }

    @Test func aTermKeepsItsKeyPathAndConstantType() throws {
        let id = 41
        let terms = PredicateShapes.terms(of: #Predicate<Item> { $0.id == id && $0.name >= "m" })
        try #require(terms.terms.count == 2)
        #expect(terms.terms[0].keyPath == \Item.id as AnyKeyPath)
        #expect(terms.terms[0].constant as? Int == 41)
        #expect(terms.terms[1].keyPath == \Item.name as AnyKeyPath)
        #expect(terms.terms[1].constant as? String == "m")
    }

    struct Tag: Record {
        var id: Int
        var label: String
        static var indexes: [RecordIndex<Tag>] { [.index(\Tag.label)] }
    }

    /// A `#Predicate` in generic code: its key path objects are made anew on every call.
    static func byID<T: Record>(_ repository: Repository<T>, _ id: Int) throws -> String where T.ID == Int {
        try repository.explain(#Predicate<T> { $0.id == id })
    }

    static func fetchByID<T: Record>(_ repository: Repository<T>, _ id: Int) throws -> [T] where T.ID == Int {
        try repository.fetch(#Predicate<T> { $0.id == id })
    }

    static func idPath<T: Record>(_ type: T.Type) -> AnyKeyPath { \T.id }

    /// Key path objects made anew on every call (generic code) are known by their value,
    /// and the id through the protocol requirement is still the id: a point lookup.
    @Test(arguments: Backend.allCases) func keyPathsMadeAtRunTimeAreKnownByValue(backend: Backend) async throws {
        let shape = RecordTypeCache.shape(of: Tag.self)
        let (first, second) = (Self.idPath(Tag.self), Self.idPath(Tag.self))
        #expect(first !== second)
        #expect(shape.facts(first).isID && shape.facts(second).isID)
        #expect(shape.facts(\Tag.id).isID && !shape.facts(\Tag.label).isID)
        #expect(shape.facts(\Tag.label).field != nil && shape.facts(first).field == nil)
        try await backend.withStore { store throws in
            defer { try? store.close() }
            try store.write { try $0.repository(Tag.self).insert(Tag(id: 2, label: "a")) }
            let repository = store.makeContext().repository(Tag.self)
            for id in [1, 2, 3] {
                let text = try Self.byID(repository, id)
                #expect(text.hasPrefix("read: point lookup of Tag id \(id)"), "\(text)")
                #expect(try Self.fetchByID(repository, id).map(\.id) == (id == 2 ? [2] : []))
            }
        }
    }
}
