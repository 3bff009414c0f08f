// Query planning: uses the comparisons of a key path with a constant that are anded at
// the top of a `#Predicate` (PredicateShapes reads them). A term on the record id becomes a point
// lookup or a key range; a term on an indexed key path becomes an index range. Unless the
// plan is exact (`isExact`), every candidate is still evaluated with `Predicate.evaluate`,
// so such a plan only narrows what is read, never decides a result. Any predicate that compiles runs: shapes the
// planner does not know fall back to a scan of the entity.
import StrataContexts
import StrataEngine
import Foundation

/// How a fetch reads its candidates. Not generic over the record type (`RecordShape`
/// says what planning needs of it), so that it runs specialized.
@usableFromInline
struct QueryPlan {
    @usableFromInline
    enum Access {
        /// The record whose id key bytes these are (an `id == constant` term).
        case point(id: [UInt8])
        case range(lower: [UInt8]?, upper: [UInt8]?)
        /// Index entries in `lower..<upper` (full keys); their values are record ids.
        case index(PlannedIndex, lower: [UInt8], upper: [UInt8]?)
        /// The one entry of a unique index under `key` (an equality term on it).
        case indexEntry(PlannedIndex, key: [UInt8])
        case scan
    }

    @usableFromInline private(set) var access = Access.scan
    /// The terms the access uses, for `explain` (rendered only there: describing a
    /// constant costs more than planning).
    private var usedTerms: [UsedTerm] = []
    /// The predicate's terms (their constants are rendered by `explain`).
    private var terms: [PlanTerm] = []

    /// A term the access uses: the field it is on, its operator, its place in `terms`.
    private struct UsedTerm {
        let field: String
        let op: PlanOperator
        let term: Int

        init(_ field: String, _ op: PlanOperator, _ term: Int) {
            (self.field, self.op, self.term) = (field, op, term)
        }
    }

    /// A term's operator and what its key path is to the record type (its constant stays
    /// in `terms`, at the same position: copying a term retains its key path and copies its
    /// constant's box).
    private struct Term {
        let op: PlanOperator
        let facts: RecordShape.KeyPathFacts
    }

    /// Whether what the access reads is exactly what the predicate holds for: every term
    /// is one the access uses, on an id or index whose bytes order and compare as the
    /// values do (`RecordIndex.isExact`). Counting such a plan needs no record decoded;
    /// any other plan's candidates are evaluated one by one.
    @usableFromInline private(set) var isExact = false
    /// The index whose order the read follows for a pushed-down sort, and its direction.
    @usableFromInline private(set) var sortedBy: (index: PlannedIndex, reverse: Bool)?
    /// For a sort on the id read in key order (`pushDown`): whether backwards.
    @usableFromInline private(set) var sortedByID: Bool?
    /// Whether the read follows the order a sort asks for (`pushDown` succeeded).
    @usableFromInline var isSortedByRead: Bool { sortedBy != nil || sortedByID != nil }
    /// How many leading components of the index read have an equality term.
    private var equalityComponents = 0
    /// Whether the index answers every term it uses exactly.
    private var exactTerms = false

    /// Plans the read of `shape`'s records for a predicate with `predicate`'s terms (nil:
    /// no predicate, every record) through the `usable` indexes.
    @usableFromInline
    init(_ predicate: PredicateTerms?, shape: RecordShape, indexes usable: [PlannedIndex]) {
        guard let predicate else {
            isExact = true
            return
        }
        self.terms = predicate.terms
        var terms: [Term] = []
        terms.reserveCapacity(predicate.terms.count)
        for term in predicate.terms { terms.append(Term(op: term.op, facts: shape.facts(term.keyPath))) }
        let everyTermPlanned = predicate.terms.count == predicate.conjuncts
        if planID(terms, shape: shape) {
            isExact = everyTermPlanned && shape.exactIDs && usedTerms.count == terms.count
            return
        }
        planIndex(terms, indexes: usable)
        if case .scan = access { return }
        isExact = everyTermPlanned && exactTerms && usedTerms.count == terms.count
    }

    /// Reads the records in the order of `sorts` (sorted key paths and directions, in the order
    /// the sort compares them) from an index or the ids when one allows it; false when the
    /// sort stays in memory. An index serves the sorts when its components after those
    /// the read fixes by equality are exactly the sorted key paths, each of a type Strata
    /// sorts in index order (`StrataOrdered`), all in one direction: ties then come in id
    /// order, as a stable sort of the id-ordered records leaves them (a last sort on the
    /// id, forwards, says just that and is served too). The ids serve a sort on the id
    /// alone when their key bytes sort as they do (integers, `UUID`).
    @usableFromInline
    mutating func pushDown(_ sorts: [PlanSort], shape: RecordShape, indexes: [PlannedIndex]) -> Bool {
        var facts = sorts.map(\.facts)
        var count = facts.count
        if count > 1, facts[count - 1].isID, !sorts[count - 1].reverse { count -= 1 }
        guard count > 0 else { return false }
        let reverse = sorts[0].reverse
        guard sorts[..<count].allSatisfy({ $0.reverse == reverse }) else { return false }
        facts.removeLast(facts.count - count)
        if facts.count == 1, facts[0].isID {
            guard shape.idsSortExactly else { return false }
            switch access {
            case .scan, .range, .point: sortedByID = reverse
            case .index, .indexEntry: return false
            }
            return true
        }
        var chosen: PlannedIndex?
        for index in indexes where chosen == nil {
            let fixed: Int
            switch access {
            case .scan: fixed = 0
            case let .index(used, _, _) where used === index: fixed = equalityComponents
            default: continue
            }
            let sorted = index.components[fixed...]
            guard sorted.count == facts.count else { continue }
            if zip(sorted, facts).allSatisfy({ $0.sortsExactly && $0.field == $1.field }) { chosen = index }
        }
        guard let index = chosen else { return false }
        if case .scan = access { access = .index(index, lower: index.keyPrefix, upper: index.keysEnd) }
        sortedBy = (index, reverse)
        return true
    }

    /// Uses the id terms; true when there were any.
    private mutating func planID(_ terms: [Term], shape: RecordShape) -> Bool {
        var lower: [UInt8]?
        var upper: [UInt8]?
        for (position, term) in terms.enumerated() where term.facts.isID {
            guard let bytes = shape.idBytes(self.terms[position].constant) else { continue }
            usedTerms.append(UsedTerm("id", term.op, position))
            switch term.op {
            case .equal:
                access = .point(id: bytes)
                usedTerms = [UsedTerm("id", .equal, position)]
                return true
            case .greater: lower = Self.larger(lower, bytes + [0])
            case .greaterOrEqual: lower = Self.larger(lower, bytes)
            case .less: upper = Self.smaller(upper, bytes)
            case .lessOrEqual: upper = Self.smaller(upper, bytes + [0])
            }
        }
        guard lower != nil || upper != nil else { return false }
        access = .range(lower: lower, upper: upper)
        return true
    }

    /// Uses the terms on one index: an equality on a unique index first, then any
    /// equality, then a range. On a compound index, equalities on leading components
    /// narrow the entries to one value's, and the next component's terms a range of them.
    private mutating func planIndex(_ terms: [Term], indexes: [PlannedIndex]) {
        guard !indexes.isEmpty, !terms.isEmpty else { return }
        // Unique indexes with an equality first, then any with an equality, then unique
        // ranges, then any range; the first index declared among equals. Each index is
        // read once.
        var best: (rank: Int, index: PlannedIndex, reading: Reading)?
        for index in indexes {
            guard let reading = Self.read(index, terms, constants: self.terms) else { continue }
            let rank = (reading.equalities > 0 ? 0 : 2) + (index.isUnique ? 0 : 1)
            if rank < best?.rank ?? 4 { best = (rank, index, reading) }
            if rank == 0 { break }
        }
        guard let (_, index, reading) = best else { return }
        if index.isUnique && reading.equalities == index.components.count {
            access = .indexEntry(index, key: reading.lower)
        } else {
            access = .index(index, lower: reading.lower, upper: reading.upper)
        }
        equalityComponents = reading.equalities
        usedTerms = reading.used
        exactTerms = reading.exact
    }

    /// How an index serves a predicate's terms (`read`).
    private typealias Reading = (lower: [UInt8], upper: [UInt8]?, used: [UsedTerm], equalities: Int, exact: Bool)

    /// How `index` serves `terms` (whose constants are in `constants`): the range of
    /// entries, the terms it answers, how many leading components have an equality, and
    /// whether it answers them exactly; nil when it answers none.
    private static func read(_ index: PlannedIndex, _ terms: [Term], constants: [PlanTerm]) -> Reading? {
        // No term on the first component: the index answers none (checked before anything
        // is built, as it is for most indexes a plan looks at).
        guard let first = index.components.first, terms.contains(where: { $0.facts.field == first.field }) else { return nil }
        var base = index.keyPrefix
        var lower = base
        var upper = index.keysEnd
        var used: [UsedTerm] = []
        var equalities = 0
        var exact = true
        for component in index.components {
            // An equality fixes this component's value: the next one is read in order
            // under it. (Other terms on the component are left to the evaluation.)
            var equality: (term: Int, bytes: [UInt8])?
            for (position, term) in terms.enumerated() where term.facts.field == component.field && term.op == .equal {
                guard let bytes = component.constantBytes(constants[position].constant) else { continue }
                equality = (position, bytes)
                break
            }
            if let equality {
                base += equality.bytes
                lower = larger(lower, base)
                upper = smallerOptional(upper, keyAfterPrefix(base))
                used.append(UsedTerm(component.name, .equal, equality.term))
                equalities += 1
                exact = exact && component.isExact
                continue
            }
            for (position, term) in terms.enumerated() where term.facts.field == component.field {
                if component.nanRanges == .comparableDefaults && term.op == .lessOrEqual { continue }
                guard let bytes = component.rangeBytes(constants[position].constant) else { continue }
                let start = base + bytes
                switch term.op {
                case .greater: if let after = keyAfterPrefix(start) { lower = larger(lower, after) } else { upper = lower }
                case .greaterOrEqual: lower = larger(lower, start)
                case .less: upper = smallerOptional(upper, start)
                case .lessOrEqual, .equal: upper = smallerOptional(upper, keyAfterPrefix(start))
                }
                used.append(UsedTerm(component.name, term.op, position))
                exact = exact && component.rangesExactly
                // NaNs sort last: a range upwards ends before them unless its operator holds
                // for them (NaNRanges).
                switch (component.nanRanges, term.op) {
                case (.ieee, .greater), (.ieee, .greaterOrEqual), (.comparableDefaults, .greater):
                    upper = smallerOptional(upper, base + nanIndexBytes)
                default: break
                }
            }
            break
        }
        return used.isEmpty ? nil : (lower, upper, used, equalities, exact)
    }

    /// Narrows the read to what comes after a record (keyset pagination) where the read's
    /// order allows: id order, or a sort read forwards from an index (the record's entry:
    /// `entryBytes` gives its value bytes in an index). Elsewhere the caller filters.
    @usableFromInline
    mutating func startAfter(idBytes: [UInt8], inIDOrder: Bool, entryBytes: (PlannedIndex) -> [UInt8]) {
        let idsForwards = sortedByID == false || (inIDOrder && sortedByID == nil)
        switch access {
        case let .range(lower, upper) where idsForwards:
            access = .range(lower: Self.larger(lower, idBytes + [0]), upper: upper)
        case .scan where idsForwards:
            access = .range(lower: idBytes + [0], upper: nil)
        case let .range(lower, upper) where sortedByID == true:
            access = .range(lower: lower, upper: Self.smaller(upper, idBytes))
        case .scan where sortedByID == true:
            access = .range(lower: nil, upper: idBytes)
        case let .index(index, lower, upper) where sortedBy.map { !$0.reverse } ?? false:
            // Only from inside the range: on a compound index the read is ordered by the
            // second value under one first value, and an entry elsewhere says nothing of
            // where that order starts.
            let entry = index.keyPrefix + entryBytes(index) + (index.isUnique ? [] : idBytes)
            guard compareKeys(entry, lower) >= 0, upper.map({ compareKeys(entry, $0) < 0 }) ?? true else { return }
            access = .index(index, lower: entry + [0], upper: upper)
        default: break
        }
    }

    /// What `explain` says: the read, the filter (`predicate`, described, when the plan
    /// is not exact) and the sort.
    func description(entity: String, predicate: String?) -> String {
        let read = switch access {
        case .point: "point lookup of \(entity) id \(usedTerms.first.map { "\(terms[$0.term].constant)" } ?? "")"
        case .range: "key range of \(entity) ids where " + renderedTerms
        case let .index(index, _, _), let .indexEntry(index, _):
            "\(index.isUnique ? "unique " : "")index \(index.name) " + (usedTerms.isEmpty ? "(every entry)" : "where " + renderedTerms)
        case .scan: "scan of every \(entity)"
        }
        let residual = if let predicate {
            isExact ? "no filter: the read is exact" : "evaluate on each candidate: \(predicate)"
        } else {
            "no filter"
        }
        var text = "read: \(read); \(residual)"
        if let sortedBy {
            text += "; sorted by reading index \(sortedBy.index.name) \(sortedBy.reverse ? "backwards" : "forwards")"
        } else if let sortedByID {
            text += "; sorted by reading the ids \(sortedByID ? "backwards" : "forwards")"
        }
        return text
    }

    private var renderedTerms: String {
        usedTerms.map { "\($0.field) \($0.op.symbol) \(terms[$0.term].constant)" }.joined(separator: " and ")
    }

    private static func larger(_ a: [UInt8]?, _ b: [UInt8]) -> [UInt8] {
        guard let a else { return b }
        return compareKeys(a, b) >= 0 ? a : b
    }

    private static func smaller(_ a: [UInt8]?, _ b: [UInt8]) -> [UInt8] {
        guard let a else { return b }
        return compareKeys(a, b) <= 0 ? a : b
    }

    private static func smallerOptional(_ a: [UInt8]?, _ b: [UInt8]?) -> [UInt8]? {
        guard let b else { return a }
        return smaller(a, b)
    }
}

/// A sort descriptor as the planner reads it: what its key path is to the record type,
/// and its direction.
@usableFromInline
struct PlanSort {
    let facts: RecordShape.KeyPathFacts
    let reverse: Bool
}
