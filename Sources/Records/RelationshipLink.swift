// A relationship as the records layer works with it: which side of its foreign key the
// declaring type is on, and the operations its index, its write checks and its delete rule
// need, typed on both ends (`Link`) and reached without the target type
// (`RelationshipLink`).
//
// Invariants:
//  RelationshipLink.L1. A record written with an id in a relationship it holds (`via`) that it did not hold
//      before names a target that exists in the writing context; the context reads that
//      target's key as a read range (Context.C4), so a concurrent delete of the
//      target conflicts with the write, in a merge or at the commit.
//  RelationshipLink.L2. Deleting a record applies each of its type's delete rules in the same context
//      before anything else sees it: every `.deny` is checked before anything is staged,
//      then the record and its index entries go, then cascades and nullifications. An
//      inverse whose rule is not `.noAction` reads the range of its referrers' index
//      entries, so a referrer added concurrently conflicts with the delete.
import StrataContexts
import StrataEngine
import Foundation
import Synchronization

/// Which of a relationship's two sides a declaration is: the record holds the ids (`via`),
/// or the targets hold the record's id (`inverse`).
@usableFromInline
enum LinkSide: Sendable {
    case via
    case inverse
}

/// A relationship of `Source`, without its target type (`Link` is the one kind).
protocol RelationshipLink<Source>: AnyObject, Sendable {
    associatedtype Source: Record
    var side: LinkSide { get }
    /// Whether a record has at most one related record this way.
    var isToOne: Bool { get }
    var deleteRule: DeleteRule { get }
    /// The foreign key both sides share: a key path of `Source` (`via`) or of the target
    /// (`inverse`), and its name as `Entity.field`.
    var foreignKey: AnyKeyPath & Sendable { get }
    var foreignKeyName: String { get }
    var targetEntity: String { get }
    /// Checks that the relationship is declared whole (RecordTypeCache keeps the answer).
    func validate() throws
    /// The index kept on the foreign key (`via` only).
    func foreignKeyIndex() -> RecordIndex<Source>?
    /// RelationshipLink.L1 for a write of `new` over `old`.
    func checkTargets(old: Source?, new: Source, in context: Context) throws
    /// How many related records a `.deny` rule refuses the delete of `record` for.
    func blockingCount(_ record: Source, in context: Context) throws -> Int
    /// RelationshipLink.L2, after `record`'s own delete is staged.
    func applyDeleteRule(to record: Source, in context: Context) throws
    /// Registers the target type in `catalog`.
    func register(in catalog: RecordCatalog)
    /// Settling a merge: record `id` is gone; the records naming it get this side's rule.
    func settleDeleted(_ id: Source.ID, in context: Context, change: () throws -> Void) throws
    /// Settling a merge: `record`'s targets that are gone apply their side's rule to it.
    func settleTargets(of record: Source, in context: Context, change: () throws -> Void) throws
    /// `checkRelationships`: sentences for targets `record` names that do not exist.
    func missingTargets(of record: Source, in context: Context) throws -> [String]
}

extension RelationshipLink {
    /// The name of the index kept on the foreign key: "ref:" and the key path's name.
    var indexName: String { "ref:" + RecordIndex<Source>.lastName(foreignKey) }
}

/// A relationship from `Source` to `Target`.
@usableFromInline
final class Link<Source: Record, Target: Record>: RelationshipLink, @unchecked Sendable {
    @usableFromInline let side: LinkSide
    let isToOne: Bool
    let deleteRule: DeleteRule
    let foreignKey: AnyKeyPath & Sendable
    let foreignKeyName: String
    /// `via`: the target ids a record holds; whether the key path is optional; whether it
    /// is an array (an entry per element); whether a target may be held by one record only.
    private let targetIDs: (@Sendable (Source) -> [Target.ID])?
    private let isOptional: Bool
    private let isElements: Bool
    private let isUnique: Bool
    /// `inverse`: the source ids a target holds, and how to clear one (nil: it cannot be).
    private let sourceIDs: (@Sendable (Target) -> [Source.ID])?
    private let clear: (@Sendable (inout Target, Source.ID) -> Void)?
    /// `referrerIndex()`, learned on first use (the counterpart is found by reflection).
    private let referrerIndexCache = Mutex<ReferrerIndex?>(nil)

    init(via keyPath: AnyKeyPath & Sendable, kind: LinkKind, rule: DeleteRule, unique: Bool, optional: Bool, elements: Bool = false,
         _ ids: @escaping @Sendable (Source) -> [Target.ID]) {
        targetIDs = ids
        isOptional = optional
        isElements = elements
        isUnique = unique
        sourceIDs = nil
        clear = nil
        side = .via
        isToOne = kind == .toOne
        deleteRule = rule
        foreignKey = keyPath
        foreignKeyName = "\(Source.self).\(RecordIndex<Source>.lastName(keyPath))"
    }

    init(inverse keyPath: AnyKeyPath & Sendable, kind: LinkKind, rule: DeleteRule, optional: Bool, elements: Bool,
         ids: @escaping @Sendable (Target) -> [Source.ID], clear: (@Sendable (inout Target, Source.ID) -> Void)?) {
        targetIDs = nil
        isOptional = optional
        isElements = elements
        isUnique = false
        sourceIDs = ids
        self.clear = clear
        side = .inverse
        isToOne = kind == .toOne
        deleteRule = rule
        foreignKey = keyPath
        foreignKeyName = "\(Target.self).\(RecordIndex<Target>.lastName(keyPath))"
    }

    var targetEntity: String { RecordTypeCache.entityName(of: Target.self) }

    /// The other side: the relationship `Target` declares on the same foreign key.
    var counterpart: Link<Target, Source>? {
        let key = HeldKeyPath(keyPath: foreignKey)
        for relationship in Target.relationships {
            if let link = relationship.declaration.link as? Link<Target, Source>, link.side != side,
               HeldKeyPath(keyPath: link.foreignKey) == key { return link }
        }
        return nil
    }

    // MARK: Declaration

    /// Checks that the relationship is declared whole (RecordTypeCache keeps the answer).
    func validate() throws {
        let here = "\(Source.self)"
        guard let other = counterpart else {
            switch side {
            case .via:
                throw RecordError.invalidRelationship("\(here) holds \(Target.self) ids at \(foreignKeyName), but \(Target.self).relationships "
                    + "declares no inverse on it: add `toMany(\(Source.self).self, inverse: \\\(foreignKeyName.dropFirst(0)))` (or `toOne`) "
                    + "to \(Target.self) and list it, with the delete rule deleting a \(Target.self) applies to its \(Source.self) records")
            case .inverse:
                throw RecordError.invalidRelationship("\(here) declares the \(Target.self) records holding its id at \(foreignKeyName), but "
                    + "\(Target.self).relationships does not hold it: add `toOne(\(Source.self).self, via: \\.\(RecordIndex<Target>.lastName(foreignKey)))` "
                    + "(or `toMany`) to \(Target.self) and list it")
            }
        }
        if side == .inverse {
            if deleteRule == .nullify && clear == nil {
                throw RecordError.invalidRelationship("\(here)'s inverse of \(foreignKeyName) nullifies, but \(foreignKeyName) is not optional: "
                    + "make it optional, or give the delete rule .cascade, .deny or .noAction")
            }
            if isToOne && !other.isUnique {
                throw RecordError.invalidRelationship("\(here) declares one \(Target.self) at \(foreignKeyName), but several may hold the same "
                    + "id there: declare \(Target.self)'s side `unique: true`, or make \(here)'s side toMany")
            }
        }
    }

    // MARK: The index (`via`)

    func foreignKeyIndex() -> RecordIndex<Source>? {
        guard side == .via, let targetIDs else { return nil }
        let (optional, elements, unique) = (isOptional, isElements, isUnique)
        let width = ForeignKey.width(Target.ID.self)
        let none: @Sendable (Any) -> [UInt8]? = { _ in nil }
        let constants: @Sendable (Any) -> [UInt8]? = elements ? none : Self.constantBytes(optional: optional)
        // Fixed-width ids are equal exactly when their bytes are, and sort as them.
        let fixed = width != nil && !elements
        let component = RecordIndex<Source>.Component(keyPath: foreignKey, constantBytes: constants, rangeBytes: none,
                                                      isExact: fixed, rangesExactly: false, sortsExactly: fixed)
        let reference = ManifestReference(index: indexName, entity: targetEntity, idWidth: width ?? 0, optional: optional && !(unique || elements),
                                          mayDangle: counterpart?.deleteRule == .noAction)
        let render: @Sendable (Source) -> String = { targetIDs($0).map { "\($0)" }.joined(separator: ", ") }
        // A unique optional key indexes no nil (many records may hold none); the others
        // index nil too, so a query for records holding none reads it.
        if elements || (unique && optional) {
            return RecordIndex(name: indexName, isUnique: unique, components: [component], bytes: { _ in [] },
                               elementBytes: { targetIDs($0).map { ForeignKey.bytes($0) } }, render: render, reference: reference)
        }
        return RecordIndex(name: indexName, isUnique: unique, components: [component],
                           bytes: { ForeignKey.bytes(targetIDs($0).first, optional: optional) }, render: render, reference: reference)
    }

    /// A predicate constant's bytes in the foreign-key index: an id, or (optional) nil.
    private static func constantBytes(optional: Bool) -> @Sendable (Any) -> [UInt8]? {
        { constant in
            if let id = constant as? Target.ID { return ForeignKey.bytes(id, optional: optional) }
            if optional, let none = constant as? Target.ID?, none == nil { return [0] }
            return nil
        }
    }

    // MARK: Writes and deletes

    /// RelationshipLink.L1: every target `new` holds and `old` did not exists, and is read.
    func checkTargets(old: Source?, new: Source, in context: Context) throws {
        guard side == .via, let targetIDs else { return }
        // (An array searched, not a set: a record holds few ids, and a set built per write
        // cost more than the search.)
        let before: [Target.ID] = if let old { targetIDs(old) } else { [] }
        for id in targetIDs(new) where !before.contains(id) {
            let key = RecordKeys.key(entity: targetEntity, id: id)
            guard try context.contains(key) else {
                throw RecordError.relatedNotFound(entity: "\(Source.self)", id: "\(new.id)", foreignKey: foreignKeyName,
                                                  target: targetEntity, targetID: "\(id)")
            }
            try context.addReadRange(key: key)
        }
    }

    /// How many related records exist that `.deny` would refuse the delete of `record` for.
    func blockingCount(_ record: Source, in context: Context) throws -> Int {
        switch side {
        case .via:
            return try (targetIDs?(record) ?? []).count { try context.contains(RecordKeys.key(entity: targetEntity, id: $0)) }
        case .inverse:
            try context.addReadRange(referrerRange(of: record.id))
            return try referrers(of: record.id, in: context).count
        }
    }

    /// RelationshipLink.L2, after `record`'s own delete is staged: cascades and nullifications.
    func applyDeleteRule(to record: Source, in context: Context) throws {
        switch (side, deleteRule) {
        case (_, .deny), (_, .noAction), (.via, .nullify):
            return
        case (.via, .cascade):
            let targets = Repository<Target>(context: context)
            for id in targetIDs?(record) ?? [] {
                try targets.deleteApplyingRules(id)
            }
        case (.inverse, .cascade), (.inverse, .nullify):
            try context.addReadRange(referrerRange(of: record.id))
            let targets = Repository<Target>(context: context)
            try targets.indexes.ensureBuilt()
            // Each read again when its turn comes: an earlier one's rules may have changed it.
            for referrer in try referrers(of: record.id, in: context).map(\.id) {
                if deleteRule == .cascade {
                    try targets.deleteApplyingRules(referrer)
                } else if let clear, var cleared = try targets.get(referrer) {
                    clear(&cleared, record.id)
                    try targets.update(cleared)
                }
            }
        }
    }

    // MARK: Settling a merge (RecordCatalog.settle)

    /// `Source` record `id` is gone from the merged state (an inverse side): the records
    /// still holding its id get this side's delete rule, as if it were deleted now.
    /// `change` runs before anything is changed (it throws under the merge policy `.error`).
    func settleDeleted(_ id: Source.ID, in context: Context, change: () throws -> Void) throws {
        guard side == .inverse, deleteRule != .noAction else { return }
        let holders = try referrers(of: id, in: context)
        guard !holders.isEmpty else { return }
        try change()
        let targets = Repository<Target>(context: context)
        switch deleteRule {
        case .deny:
            throw RecordError.deleteDenied(entity: "\(Source.self)", id: "\(id)", foreignKey: foreignKeyName, count: holders.count)
        case .cascade:
            for holder in holders { try targets.deleteApplyingRules(holder.id) }
        case .nullify:
            for holder in holders {
                guard var cleared = try targets.get(holder.id) else { continue }
                clear?(&cleared, id)
                try targets.update(cleared)
            }
        case .noAction:
            return
        }
    }

    /// `record` holds ids (a `via` side) of targets the merged state may no longer hold:
    /// for each that is gone, the target's delete rule for this relationship is applied to
    /// `record`, as the target's delete would have applied it.
    func settleTargets(of record: Source, in context: Context, change: () throws -> Void) throws {
        guard side == .via, let targetIDs, let other = counterpart, other.deleteRule != .noAction else { return }
        let missing = try targetIDs(record).filter { try !context.contains(RecordKeys.key(entity: targetEntity, id: $0)) }
        guard let first = missing.first else { return }
        try change()
        let sources = Repository<Source>(context: context)
        switch other.deleteRule {
        case .deny:
            throw RecordError.deleteDenied(entity: targetEntity, id: "\(first)", foreignKey: foreignKeyName, count: 1)
        case .cascade:
            try sources.deleteApplyingRules(record.id)
        case .nullify:
            var cleared = record
            for id in missing { other.clear?(&cleared, id) }
            try sources.update(cleared)
        case .noAction:
            return
        }
    }

    /// Sentences for each target `record` holds (`via`) that does not exist, unless the
    /// other side's delete rule (`.noAction`) allows it.
    func missingTargets(of record: Source, in context: Context) throws -> [String] {
        guard side == .via, let targetIDs, counterpart?.deleteRule != .noAction else { return [] }
        return try targetIDs(record).compactMap { id in
            try context.contains(RecordKeys.key(entity: targetEntity, id: id)) ? nil
                : "\(Source.self) \(record.id) refers to \(targetEntity) \(id) through \(foreignKeyName), which does not exist"
        }
    }

    func register(in catalog: RecordCatalog) {
        catalog.register(Target.self, shape: RecordTypeCache.shape(of: Target.self))
    }

    // MARK: Reading related records

    /// The targets `record` holds the ids of (`via`), in the order it holds them, those
    /// that exist.
    func targets(of record: Source, in context: Context) throws -> [Target] {
        let targets = Repository<Target>(context: context)
        return try (targetIDs?(record) ?? []).compactMap { try targets.get($0) }
    }

    /// The target ids `record` holds (`via`).
    @usableFromInline
    func heldIDs(_ record: Source) -> [Target.ID] { targetIDs?(record) ?? [] }

    /// The source ids `target` holds (`inverse`).
    func heldSourceIDs(_ target: Target) -> [Source.ID] { sourceIDs?(target) ?? [] }

    /// Where the index entries of the targets holding `id` lie (`inverse`): the foreign
    /// key's index on `Target`, under `id`'s bytes.
    func referrerRange(of id: Source.ID) -> KeyRange {
        referrerIndex().range(of: id.keyBytes)
    }

    /// Where the referrers of a record lie in `Target`'s foreign-key index (`inverse`),
    /// without the types: what a read through the relationship needs per record.
    func referrerIndex() -> ReferrerIndex {
        if let known = referrerIndexCache.withLock({ $0 }) { return known }
        let prefix = RecordKeys.indexPrefix(entity: targetEntity, index: "ref:" + RecordIndex<Target>.lastName(foreignKey))
        let other = counterpart
        let layout = ReferrerIndex(prefix: prefix, escaped: ForeignKey.width(Source.ID.self) == nil,
                                   marked: other.map { $0.isOptional && !$0.isElements && !$0.isUnique } ?? false)
        referrerIndexCache.withLock { $0 = layout }
        return layout
    }

    /// `referrerIndex()` when `Target`'s manifest lists the index (nil: read every target).
    @usableFromInline
    func usableReferrerIndex(in context: Context) throws -> ReferrerIndex? {
        let indexName = "ref:" + RecordIndex<Target>.lastName(foreignKey)
        guard try Repository<Target>(context: context).indexes.usable().contains(where: { $0.name == indexName }) else { return nil }
        return referrerIndex()
    }

    /// How a target id begins an entry of the foreign key's index (`via`): behind the
    /// optional marker when the index holds nil too (`foreignKeyIndex`).
    func entryValue(for id: Target.ID) -> [UInt8] {
        isElements || (isUnique && isOptional) ? ForeignKey.bytes(id) : ForeignKey.bytes(id, optional: isOptional)
    }

    /// The targets that hold `id` (`inverse`), in id order: from the foreign key's index
    /// when the manifest lists it, else by reading every target.
    func referrers(of id: Source.ID, in context: Context) throws -> [Target] {
        try referrers(ofAll: [id], in: context)[0]
    }

    /// `referrers(of:in:)` of each of `ids`, with one look at the manifest, and one read of
    /// every target when the index is not built.
    @usableFromInline
    func referrers(ofAll ids: [Source.ID], in context: Context) throws -> [[Target]] {
        let targets = Repository<Target>(context: context)
        let indexName = "ref:" + RecordIndex<Target>.lastName(foreignKey)
        guard try targets.indexes.usable().contains(where: { $0.name == indexName }) else {
            let wanted = Dictionary(ids.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
            var found = Array(repeating: [Target](), count: ids.count)
            try targets.forEachMatch(nil) { target in
                for id in Set(heldSourceIDs(target)) { if let position = wanted[id] { found[position].append(target) } }
            }
            for (position, id) in ids.enumerated() where wanted[id] != position { found[position] = found[wanted[id]!] }
            return found
        }
        return try ids.map { id in
            let range = referrerRange(of: id)
            var holders: [[UInt8]] = []
            try context.forEach(from: range.lower, to: range.upper) { _, value in
                holders.append(value)
                return true
            }
            return try holders.compactMap { try targets.get(keyBytes: $0) }
        }
    }
}

/// Where the records holding a given id lie in a relationship's foreign-key index: under
/// the index's prefix, the id's bytes (escaped unless fixed-width, after `01` when the key
/// is optional and the index holds nil), then each holder's id.
@usableFromInline
struct ReferrerIndex: Sendable {
    let prefix: [UInt8]
    let escaped: Bool
    let marked: Bool

    /// The entries of the records holding the id whose key bytes are `id`.
    @usableFromInline
    func range(of id: [UInt8]) -> KeyRange {
        let bytes = escaped ? escapedIndexBytes(id) : id
        return KeyRange(prefix: prefix + (marked ? [1] + bytes : bytes))
    }
}

/// Whether a relationship relates a record to one record or to many.
enum LinkKind {
    case toOne
    case toMany
}
