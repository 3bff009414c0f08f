// Relationships between record types, declared on the types (Core Data's relationships with
// inverses and delete rules, over records that hold their targets' ids as GRDB's
// associations do):
//
//     struct Author: Record {
//         var id: Int
//         var name: String
//         static let books = toMany(Book.self, inverse: \Book.authorID, deleteRule: .cascade)
//         static var relationships: [any RecordRelationship<Author>] { [books] }
//     }
//     struct Book: Record {
//         var id: Int
//         var authorID: Author.ID?
//         static let author = toOne(Author.self, via: \.authorID)
//         static var relationships: [any RecordRelationship<Book>] { [author] }
//     }
//
// A relationship `via` a key path is held by the declaring record: its target's id (or nil,
// or an array of ids). Its inverse, declared on the target type with the same key path, is
// the records that hold the declaring record's id. Strata keeps an index on every such key
// path (named "ref:" and the key path's name), so an inverse is always exact, in the same
// commit as the records. Every relationship must be declared on both sides, as Core Data
// requires inverses: each side's delete rule says what deleting one of its records does to
// the other side (RelationshipRules.swift).
import StrataContexts
import Foundation

/// What deleting a record does to the records one of its type's relationships relates it
/// to (Core Data's delete rules).
///
/// - For a relationship held by the deleted record (`via:`): `.cascade` deletes the
///   records it names, `.deny` refuses while one of them exists; `.nullify` and `.noAction`
///   leave them alone (the reference goes with the record).
/// - For an inverse (`inverse:`, the records that name the deleted one): `.cascade` deletes
///   them, `.nullify` clears their reference (to nil, or out of their array of ids), `.deny`
///   refuses while one exists, and `.noAction` leaves them naming a record that is gone.
public enum DeleteRule: String, Sendable, Codable, CaseIterable {
    case cascade
    case nullify
    case deny
    case noAction
}

/// A relationship of `Source`, declared on it (see `toOne` and `toMany`) and listed in its
/// `relationships`.
public protocol RecordRelationship<Source>: Sendable {
    associatedtype Source: Record
    /// What Strata keeps of the relationship.
    var declaration: RelationshipDeclaration<Source> { get }
}

/// What Strata keeps of a relationship: opaque to applications.
public struct RelationshipDeclaration<Source: Record>: Sendable {
    let link: any RelationshipLink<Source>
}

/// A relationship to at most one `Target`.
public struct ToOne<Source: Record, Target: Record>: RecordRelationship {
    @usableFromInline let link: Link<Source, Target>
    public var declaration: RelationshipDeclaration<Source> { RelationshipDeclaration(link: link) }
}

/// A relationship to any number of `Target`s.
public struct ToMany<Source: Record, Target: Record>: RecordRelationship {
    @usableFromInline let link: Link<Source, Target>
    public var declaration: RelationshipDeclaration<Source> { RelationshipDeclaration(link: link) }
}

extension Record {
    /// The relationships of this type (none by default): list here every `toOne` and
    /// `toMany` the type declares, so that their indexes are kept and their delete rules
    /// applied.
    public static var relationships: [any RecordRelationship<Self>] { [] }

    /// A relationship to the `Target` whose id this record holds at `keyPath` (nil: none).
    /// Deleting this record: `.cascade` deletes the target, `.deny` refuses while it
    /// exists. `unique` lets at most one record hold a given target, as the target's
    /// `toOne(_:inverse:)` needs.
    public static func toOne<Target: Record>(_ target: Target.Type, via keyPath: WritableKeyPath<Self, Target.ID?> & Sendable,
                                             deleteRule: DeleteRule = .nullify, unique: Bool = false) -> ToOne<Self, Target> {
        ToOne(link: Link(via: keyPath, kind: .toOne, rule: deleteRule, unique: unique, optional: true) { $0[keyPath: keyPath].map { [$0] } ?? [] })
    }

    /// A relationship to the `Target` whose id this record holds at `keyPath`: every record
    /// of this type has one.
    public static func toOne<Target: Record>(_ target: Target.Type, via keyPath: WritableKeyPath<Self, Target.ID> & Sendable,
                                             deleteRule: DeleteRule = .nullify, unique: Bool = false) -> ToOne<Self, Target> {
        ToOne(link: Link(via: keyPath, kind: .toOne, rule: deleteRule, unique: unique, optional: false) { [$0[keyPath: keyPath]] })
    }

    /// A relationship to the `Target`s whose ids this record holds at `keyPath` (a
    /// many-to-many relationship when the target's inverse is to-many too).
    public static func toMany<Target: Record>(_ target: Target.Type, via keyPath: WritableKeyPath<Self, [Target.ID]> & Sendable,
                                              deleteRule: DeleteRule = .nullify) -> ToMany<Self, Target> {
        ToMany(link: Link(via: keyPath, kind: .toMany, rule: deleteRule, unique: false, optional: false, elements: true) { $0[keyPath: keyPath] })
    }

    /// The `Target`s that hold this record's id at `keyPath`: the inverse of the target's
    /// `toOne(_:via:)`. Deleting this record applies `deleteRule` to them.
    public static func toMany<Target: Record>(_ target: Target.Type, inverse keyPath: WritableKeyPath<Target, Self.ID?> & Sendable,
                                              deleteRule: DeleteRule = .nullify) -> ToMany<Self, Target> {
        ToMany(link: Link(inverse: keyPath, kind: .toMany, rule: deleteRule, optional: true, elements: false,
                          ids: { $0[keyPath: keyPath].map { [$0] } ?? [] }, clear: { target, _ in target[keyPath: keyPath] = nil }))
    }

    /// The `Target`s that hold this record's id at `keyPath`, which they cannot clear:
    /// `deleteRule` is `.cascade`, `.deny` or `.noAction`.
    public static func toMany<Target: Record>(_ target: Target.Type, inverse keyPath: WritableKeyPath<Target, Self.ID> & Sendable,
                                              deleteRule: DeleteRule) -> ToMany<Self, Target> {
        ToMany(link: Link(inverse: keyPath, kind: .toMany, rule: deleteRule, optional: false, elements: false,
                          ids: { [$0[keyPath: keyPath]] }, clear: nil))
    }

    /// The `Target`s whose array at `keyPath` holds this record's id: the inverse of the
    /// target's `toMany(_:via:)`. `.nullify` takes this record's id out of their arrays.
    public static func toMany<Target: Record>(_ target: Target.Type, inverse keyPath: WritableKeyPath<Target, [Self.ID]> & Sendable,
                                              deleteRule: DeleteRule = .nullify) -> ToMany<Self, Target> {
        ToMany(link: Link(inverse: keyPath, kind: .toMany, rule: deleteRule, optional: false, elements: true,
                          ids: { $0[keyPath: keyPath] }, clear: { target, id in target[keyPath: keyPath].removeAll { $0 == id } }))
    }

    /// The one `Target` that holds this record's id at `keyPath`: the inverse of the
    /// target's `toOne(_:via:unique: true)` (a one-to-one relationship).
    public static func toOne<Target: Record>(_ target: Target.Type, inverse keyPath: WritableKeyPath<Target, Self.ID?> & Sendable,
                                             deleteRule: DeleteRule = .nullify) -> ToOne<Self, Target> {
        ToOne(link: Link(inverse: keyPath, kind: .toOne, rule: deleteRule, optional: true, elements: false,
                         ids: { $0[keyPath: keyPath].map { [$0] } ?? [] }, clear: { target, _ in target[keyPath: keyPath] = nil }))
    }

    /// The one `Target` that holds this record's id at a key path it cannot clear.
    public static func toOne<Target: Record>(_ target: Target.Type, inverse keyPath: WritableKeyPath<Target, Self.ID> & Sendable,
                                             deleteRule: DeleteRule) -> ToOne<Self, Target> {
        ToOne(link: Link(inverse: keyPath, kind: .toOne, rule: deleteRule, optional: false, elements: false,
                         ids: { [$0[keyPath: keyPath]] }, clear: nil))
    }
}

/// How a target's id sits in a relationship index's entry: its key bytes as they are when
/// every id of its type takes the same number of them (the integers, `UUID`), else escaped
/// as an index string is (each `00` written `00 FF`, then `00 00`), so that the entry ends
/// where the id does and ids keep their identity as key bytes (FORMAT.md, "Keys").
enum ForeignKey {
    /// The bytes every id of `type` takes, or nil when they vary (then they are escaped).
    static func width<ID: RecordID>(_ type: ID.Type) -> Int? {
        switch ObjectIdentifier(type) {
        case ObjectIdentifier(Int.self), ObjectIdentifier(Int64.self), ObjectIdentifier(UInt64.self): 8
        case ObjectIdentifier(UUID.self): 16
        default: nil
        }
    }

    static func bytes<ID: RecordID>(_ id: ID) -> [UInt8] {
        width(ID.self) == nil ? escapedIndexBytes(id.keyBytes) : id.keyBytes
    }

    /// An optional id's bytes: `00` for nil, or `01` and the id's.
    static func bytes<ID: RecordID>(_ id: ID?, optional: Bool) -> [UInt8] {
        guard optional else { return id.map(bytes) ?? [] }
        return id.map { [1] + bytes($0) } ?? [0]
    }
}
