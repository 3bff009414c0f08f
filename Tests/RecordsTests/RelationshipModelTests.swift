import Strata
import StrataTesting
import Foundation
import Testing

// A graph with every kind of relationship and every delete rule, driven by random writes
// and deletes through random nested units, merges under every policy and refreshes, and
// checked after every step against a model written from the rules' documentation.
//
//  Team    —members→ Member (inverse of Member.teamID, cascade)
//  Member  —team→ Team, —mentor→ Member (self), —skills→ [Skill] (held ids);
//          —mentees→ Member (nullify), —projects→ Project (deny), —badges→ Badge (no
//          action), —desk→ Desk (one-to-one, cascade)
//  Skill   —holders→ Member (inverse of Member.skillIDs, nullify)
//  Project —lead→ Member (a required id)
//  Badge   —member→ Member (held; deleting a badge cascades to its member)
//  Desk    —member→ Member (held, unique)

struct GTeam: Record, Hashable {
    var id: Int
    var name: String
    static let members = toMany(GMember.self, inverse: \GMember.teamID, deleteRule: .cascade)
    static var relationships: [any RecordRelationship<GTeam>] { [members] }
}

struct GMember: Record, Hashable {
    var id: Int
    var teamID: Int?
    var mentorID: Int?
    var skillIDs: [Int]
    static let team = toOne(GTeam.self, via: \.teamID)
    static let mentor = toOne(GMember.self, via: \.mentorID)
    static let mentees = toMany(GMember.self, inverse: \GMember.mentorID, deleteRule: .nullify)
    static let skills = toMany(GSkill.self, via: \.skillIDs)
    static let projects = toMany(GProject.self, inverse: \GProject.leadID, deleteRule: .deny)
    static let badges = toMany(GBadge.self, inverse: \GBadge.memberID, deleteRule: .noAction)
    static let desk = toOne(GDesk.self, inverse: \GDesk.memberID, deleteRule: .cascade)
    static var relationships: [any RecordRelationship<GMember>] { [team, mentor, mentees, skills, projects, badges, desk] }
}

struct GSkill: Record, Hashable {
    var id: Int
    static let holders = toMany(GMember.self, inverse: \GMember.skillIDs, deleteRule: .nullify)
    static var relationships: [any RecordRelationship<GSkill>] { [holders] }
}

struct GProject: Record, Hashable {
    var id: Int
    var leadID: Int
    static let lead = toOne(GMember.self, via: \.leadID)
    static var relationships: [any RecordRelationship<GProject>] { [lead] }
}

struct GBadge: Record, Hashable {
    var id: Int
    var memberID: Int?
    static let member = toOne(GMember.self, via: \.memberID, deleteRule: .cascade)
    static var relationships: [any RecordRelationship<GBadge>] { [member] }
}

struct GDesk: Record, Hashable {
    var id: Int
    var memberID: Int?
    static let member = toOne(GMember.self, via: \.memberID, unique: true)
    static var relationships: [any RecordRelationship<GDesk>] { [member] }
}

/// The graph as the model holds it: every record, by kind and id.
struct GraphModel: Equatable {
    enum Kind: CaseIterable { case team, member, skill, project, badge, desk }

    var teams: [Int: GTeam] = [:]
    var members: [Int: GMember] = [:]
    var skills: [Int: GSkill] = [:]
    var projects: [Int: GProject] = [:]
    var badges: [Int: GBadge] = [:]
    var desks: [Int: GDesk] = [:]

    /// Which records the state holds, by kind and id, with a value to compare.
    var keys: [String: String] {
        var all: [String: String] = [:]
        for (id, value) in teams { all["team \(id)"] = "\(value)" }
        for (id, value) in members { all["member \(id)"] = "\(value)" }
        for (id, value) in skills { all["skill \(id)"] = "\(value)" }
        for (id, value) in projects { all["project \(id)"] = "\(value)" }
        for (id, value) in badges { all["badge \(id)"] = "\(value)" }
        for (id, value) in desks { all["desk \(id)"] = "\(value)" }
        return all
    }

    struct Refused: Error {}

    // MARK: Writes (RelationshipLink.L1): a record may newly name only records that exist.

    mutating func upsert(_ member: GMember) throws {
        let old = members[member.id]
        if let team = member.teamID, team != old?.teamID, teams[team] == nil { throw Refused() }
        if let mentor = member.mentorID, mentor != old?.mentorID, members[mentor] == nil { throw Refused() }
        for skill in member.skillIDs where !(old?.skillIDs.contains(skill) ?? false) && skills[skill] == nil { throw Refused() }
        members[member.id] = member
    }

    mutating func upsert(_ project: GProject) throws {
        if project.leadID != projects[project.id]?.leadID, members[project.leadID] == nil { throw Refused() }
        projects[project.id] = project
    }

    mutating func upsert(_ badge: GBadge) throws {
        if let member = badge.memberID, member != badges[badge.id]?.memberID, members[member] == nil { throw Refused() }
        badges[badge.id] = badge
    }

    mutating func upsert(_ desk: GDesk) throws {
        if let member = desk.memberID {
            if member != desks[desk.id]?.memberID, members[member] == nil { throw Refused() }
            if desks.values.contains(where: { $0.memberID == member && $0.id != desk.id }) { throw Refused() }
        }
        desks[desk.id] = desk
    }

    // MARK: Deletes (RelationshipLink.L2): every deny first, then the record, then cascades and nullifies.

    mutating func delete(_ kind: Kind, _ id: Int) throws {
        switch kind {
        case .team:
            guard teams.removeValue(forKey: id) != nil else { throw Refused() }
            for member in members.values.filter({ $0.teamID == id }).sorted(by: { $0.id < $1.id }) where members[member.id] != nil {
                try delete(.member, member.id)
            }
        case .member:
            guard members[id] != nil else { throw Refused() }
            if projects.values.contains(where: { $0.leadID == id }) { throw Refused() }
            members[id] = nil
            for mentee in members.values.filter({ $0.mentorID == id }) { members[mentee.id]?.mentorID = nil }
            for desk in desks.values.filter({ $0.memberID == id }) { desks[desk.id] = nil }
        case .skill:
            guard skills.removeValue(forKey: id) != nil else { throw Refused() }
            for member in members.values where member.skillIDs.contains(id) { members[member.id]?.skillIDs.removeAll { $0 == id } }
        case .project:
            guard projects.removeValue(forKey: id) != nil else { throw Refused() }
        case .badge:
            guard let badge = badges.removeValue(forKey: id) else { throw Refused() }
            if let member = badge.memberID, members[member] != nil { try delete(.member, member) }
        case .desk:
            guard desks.removeValue(forKey: id) != nil else { throw Refused() }
        }
    }

    // MARK: Merges: records settled key by key, then the rules kept.

    /// The state after merging `child` (written: `childWritten`) into `parent`
    /// (`parentWritten` since the fork) under `policy`, or nil when the merge fails.
    static func merged(child: GraphModel, childWritten: Set<String>, parent: GraphModel, parentWritten: Set<String>,
                       policy: MergePolicy) -> GraphModel? {
        // Written keys include the unique desk entries ("deskentry m"), which settle by the
        // policy too, and then must agree with the records (`desksAreUnique`).
        let conflicts = childWritten.intersection(parentWritten)
        if policy == .error && !conflicts.isEmpty { return nil }
        var result = parent
        for key in childWritten where !key.hasPrefix("deskentry") && !(policy == .parentWins && conflicts.contains(key)) {
            result.take(key, from: child)
        }
        guard result.desksAreUnique else { return nil }
        var settled = result
        do { try settled.keepRules() } catch { return nil }
        if policy == .error && settled != result { return nil }
        return settled
    }

    /// The keys `before` to `after` wrote: every record that changed, and the unique desk
    /// entry of each member a desk stopped or started naming.
    static func written(from before: GraphModel, to after: GraphModel) -> Set<String> {
        let (old, new) = (before.keys, after.keys)
        var written = Set(old.keys.filter { new[$0] != old[$0] }).union(new.keys.filter { old[$0] == nil })
        for id in Set(before.desks.keys).union(after.desks.keys) where before.desks[id]?.memberID != after.desks[id]?.memberID {
            for member in [before.desks[id]?.memberID, after.desks[id]?.memberID].compactMap({ $0 }) { written.insert("deskentry \(member)") }
        }
        return written
    }

    /// Whether merging needed the rules kept (a record naming one that is gone).
    static func mergeNeedsRules(child: GraphModel, childWritten: Set<String>, parent: GraphModel, parentWritten: Set<String>) -> Bool {
        var result = parent
        for key in childWritten where !key.hasPrefix("deskentry") { result.take(key, from: child) }
        var settled = result
        return (try? settled.keepRules()) == nil || settled != result
    }

    /// Takes record `key`'s state (or its absence) from `other`.
    mutating func take(_ key: String, from other: GraphModel) {
        let parts = key.split(separator: " ")
        let id = Int(parts[1])!
        switch parts[0] {
        case "team": teams[id] = other.teams[id]
        case "member": members[id] = other.members[id]
        case "skill": skills[id] = other.skills[id]
        case "project": projects[id] = other.projects[id]
        case "badge": badges[id] = other.badges[id]
        default: desks[id] = other.desks[id]
        }
    }

    var desksAreUnique: Bool {
        let held = desks.values.compactMap(\.memberID)
        return Set(held).count == held.count
    }

    /// Applies, until nothing changes, the delete rule of each gone record to the records
    /// still naming it (no action: left naming it).
    mutating func keepRules() throws {
        while true {
            if let member = members.values.sorted(by: { $0.id < $1.id }).first(where: { $0.teamID.map { teams[$0] == nil } ?? false }) {
                try delete(.member, member.id)
                continue
            }
            if let mentee = members.values.first(where: { $0.mentorID.map { members[$0] == nil } ?? false }) {
                members[mentee.id]?.mentorID = nil
                continue
            }
            if let holder = members.values.first(where: { $0.skillIDs.contains { skills[$0] == nil } }) {
                members[holder.id]?.skillIDs.removeAll { skills[$0] == nil }
                continue
            }
            if projects.values.contains(where: { members[$0.leadID] == nil }) { throw Refused() }
            if let desk = desks.values.first(where: { $0.memberID.map { members[$0] == nil } ?? false }) {
                desks[desk.id] = nil
                continue
            }
            return
        }
    }
}

@Suite struct RelationshipModelTests {
    /// What a context holds, read back as the model holds it.
    static func read(_ context: Context) throws -> GraphModel {
        var model = GraphModel()
        for team in try context.repository(GTeam.self).all() { model.teams[team.id] = team }
        for member in try context.repository(GMember.self).all() { model.members[member.id] = member }
        for skill in try context.repository(GSkill.self).all() { model.skills[skill.id] = skill }
        for project in try context.repository(GProject.self).all() { model.projects[project.id] = project }
        for badge in try context.repository(GBadge.self).all() { model.badges[badge.id] = badge }
        for desk in try context.repository(GDesk.self).all() { model.desks[desk.id] = desk }
        return model
    }

    /// Every index, every relationship and every inverse of `context` is what its records say.
    static func checkIntegrity(_ context: Context, _ model: GraphModel, _ where_: String) throws {
        var problems = try context.repository(GTeam.self).checkIndexes() + context.repository(GMember.self).checkIndexes()
        problems += try context.repository(GSkill.self).checkIndexes() + context.repository(GProject.self).checkIndexes()
        problems += try context.repository(GBadge.self).checkIndexes() + context.repository(GDesk.self).checkIndexes()
        #expect(problems.isEmpty, "\(where_): \(problems)")
        for team in model.teams.values {
            let members = try team.related(GTeam.members, in: context).map(\.id)
            #expect(members == model.members.values.filter { $0.teamID == team.id }.map(\.id).sorted(), "\(where_): team \(team.id)")
        }
        for member in model.members.values {
            #expect(try member.related(GMember.mentees, in: context).map(\.id) == model.members.values.filter { $0.mentorID == member.id }.map(\.id).sorted(), "\(where_)")
            #expect(try member.related(GMember.desk, in: context)?.id == model.desks.values.first { $0.memberID == member.id }?.id, "\(where_)")
            #expect(try member.related(GMember.badges, in: context).map(\.id) == model.badges.values.filter { $0.memberID == member.id }.map(\.id).sorted(), "\(where_)")
        }
        for skill in model.skills.values {
            #expect(try skill.related(GSkill.holders, in: context).map(\.id) == model.members.values.filter { $0.skillIDs.contains(skill.id) }.map(\.id).sorted(), "\(where_)")
        }
    }

    /// One context being driven: the context, its model, and the records it wrote since it
    /// was opened.
    final class Driven {
        let context: Context
        var model: GraphModel
        var written: Set<String> = []
        init(_ context: Context, _ model: GraphModel) {
            self.context = context
            self.model = model
        }
    }

    @Test(arguments: [UInt64(1), 2, 3, 4, 5, 6])
    func randomGraphsKeepEveryRuleThroughNestedUnitsMergesAndRefreshes(seed: UInt64) throws {
        print("RelationshipModelTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        func int(_ range: Range<Int>) -> Int { range.lowerBound + Int(random.next() % UInt64(range.count)) }
        func maybe(_ range: Range<Int>) -> Int? { int(0..<4) == 0 ? nil : int(range) }
        let policies: [MergePolicy] = [.error, .childWins, .parentWins]
        let store = try Store.inMemory()
        var stored = GraphModel()
        var steps = 0
        var outcomes: [String: Int] = [:]
        /// The round's steps, for a failure's message.
        var log: [String] = []

        /// One random write or delete on `driven`, through both the repository and the model,
        /// each deciding on its own whether it is refused.
        func step(_ driven: Driven, _ where_: String) throws {
            let before = driven.model
            let kind = GraphModel.Kind.allCases[int(0..<6)]
            let deleting = int(0..<3) == 0
            /// Mostly an id the context holds (so that references mostly hold), sometimes any.
            func pickID(_ kind: GraphModel.Kind) -> Int {
                let held: [Int] = switch kind {
                case .team: Array(before.teams.keys)
                case .member: Array(before.members.keys)
                case .skill: Array(before.skills.keys)
                case .project: Array(before.projects.keys)
                case .badge: Array(before.badges.keys)
                case .desk: Array(before.desks.keys)
                }
                return held.isEmpty || int(0..<5) == 0 ? int(0..<8) : held.sorted()[int(0..<held.count)]
            }
            func reference(_ kind: GraphModel.Kind) -> Int? { int(0..<5) == 0 ? nil : pickID(kind) }
            let id = deleting || int(0..<2) == 0 ? pickID(kind) : int(0..<8)
            let member = GMember(id: id, teamID: reference(.team), mentorID: reference(.member),
                                 skillIDs: (0..<int(0..<3)).map { _ in pickID(.skill) })
            let (team, project) = (GTeam(id: id, name: "t\(int(0..<3))"), GProject(id: id, leadID: pickID(.member)))
            let (badge, desk) = (GBadge(id: id, memberID: reference(.member)), GDesk(id: id, memberID: reference(.member)))
            var expected: GraphModel? = before
            do {
                if deleting {
                    try expected!.delete(kind, id)
                } else {
                    switch kind {
                    case .team: expected!.teams[id] = team
                    case .member: try expected!.upsert(member)
                    case .skill: expected!.skills[id] = GSkill(id: id)
                    case .project: try expected!.upsert(project)
                    case .badge: try expected!.upsert(badge)
                    case .desk: try expected!.upsert(desk)
                    }
                }
            } catch {
                expected = nil
            }
            let context = driven.context
            var done = true
            do {
                switch (kind, deleting) {
                case (.team, true): try context.repository(GTeam.self).delete(id)
                case (.member, true): try context.repository(GMember.self).delete(id)
                case (.skill, true): try context.repository(GSkill.self).delete(id)
                case (.project, true): try context.repository(GProject.self).delete(id)
                case (.badge, true): try context.repository(GBadge.self).delete(id)
                case (.desk, true): try context.repository(GDesk.self).delete(id)
                case (.team, false): try context.repository(GTeam.self).upsert(team)
                case (.member, false): try context.repository(GMember.self).upsert(member)
                case (.skill, false): try context.repository(GSkill.self).upsert(GSkill(id: id))
                case (.project, false): try context.repository(GProject.self).upsert(project)
                case (.badge, false): try context.repository(GBadge.self).upsert(badge)
                case (.desk, false): try context.repository(GDesk.self).upsert(desk)
                }
            } catch is RecordError {
                done = false
            }
            let written: String = switch kind {
            case .member: "\(member)"
            case .team: "\(team)"
            case .project: "\(project)"
            case .badge: "\(badge)"
            case .desk: "\(desk)"
            case .skill: "skill \(id)"
            }
            let what = "\(where_) step \(steps): \(deleting ? "delete \(kind) \(id)" : "upsert \(written)")"
            log.append(what + (done ? "" : " (refused)"))
            #expect(done == (expected != nil), "\(what): the store \(done ? "did it" : "refused"), the model \(expected != nil ? "did it" : "refused")")
            let actual = try Self.read(context)
            if done, let expected {
                #expect(actual == expected, "\(what)\n  store \(actual.keys.sorted { $0.key < $1.key })\n  model \(expected.keys.sorted { $0.key < $1.key })")
                if !deleting { driven.written.insert("\(kind) \(id)") }
                driven.written.formUnion(GraphModel.written(from: before, to: expected))
            } else {
                #expect(actual == before, "\(what): a refused change changed something")
            }
            driven.model = actual
            steps += 1
            outcomes[(deleting ? "delete " : "upsert ") + (done ? "done" : "refused"), default: 0] += 1
        }

        for round in 0..<250 {
            log = []
            let root = Driven(store.makeContext(mergePolicy: policies[int(0..<3)]), stored)
            for _ in 0..<int(0..<4) { try step(root, "round \(round) root") }
            if int(0..<2) == 0 {
                // A child, and the parent writing beside it, then a merge or a discard.
                let policy = policies[int(0..<3)]
                let child = Driven(try root.context.makeChild(mergePolicy: policy), root.model)
                let parentWrittenBefore = root.written
                for _ in 0..<int(2..<9) {
                    if int(0..<2) == 0 { try step(root, "round \(round) parent") } else { try step(child, "round \(round) child \(policy)") }
                }
                if int(0..<5) == 0 {
                    child.context.discard()
                    outcomes["discard", default: 0] += 1
                } else {
                    let parentWritten = root.written.subtracting(parentWrittenBefore)
                    let expected = GraphModel.merged(child: child.model, childWritten: child.written, parent: root.model,
                                                     parentWritten: parentWritten, policy: policy)
                    if GraphModel.mergeNeedsRules(child: child.model, childWritten: child.written, parent: root.model, parentWritten: parentWritten) {
                        outcomes["merge that needed the rules", default: 0] += 1
                    }
                    do {
                        try child.context.commit()
                        #expect(expected != nil, "round \(round): the merge (\(policy)) went through where the model refused it")
                        outcomes["merge \(policy) done", default: 0] += 1
                    } catch {
                        #expect(expected == nil, "round \(round): the merge (\(policy)) failed where the model did not: \(error)\n\(log.joined(separator: "\n"))")
                        outcomes["merge \(policy) refused", default: 0] += 1
                        child.context.discard()
                    }
                    let actual = try Self.read(root.context)
                    if let expected { #expect(actual == expected, "round \(round) merge \(policy)\n  store \(actual.keys.sorted { $0.key < $1.key })\n  model \(expected.keys.sorted { $0.key < $1.key })") }
                    if expected != nil {
                        // What the merge staged in the root is the root's own write now.
                        root.written.formUnion(child.written)
                        root.written.formUnion(GraphModel.written(from: root.model, to: actual))
                    }
                    root.model = actual
                }
            }
            if int(0..<4) == 0 {
                // Another unit commits first; this root moves to it under its policy.
                let other = Driven(store.makeContext(), stored)
                for _ in 0..<int(1..<5) { try step(other, "round \(round) other") }
                if GraphModel.mergeNeedsRules(child: root.model, childWritten: root.written, parent: other.model, parentWritten: other.written) {
                    outcomes["refresh that needed the rules", default: 0] += 1
                }
                try other.context.commit()
                stored = other.model
                let expected = GraphModel.merged(child: root.model, childWritten: root.written, parent: stored,
                                                 parentWritten: other.written, policy: root.context.mergePolicy)
                do {
                    try root.context.refresh()
                    #expect(expected != nil, "round \(round): refresh (\(root.context.mergePolicy)) went through where the model refused it")
                    outcomes["refresh done", default: 0] += 1
                    let actual = try Self.read(root.context)
                    if let expected { #expect(actual == expected, "round \(round) refresh\n  store \(actual.keys.sorted { $0.key < $1.key })\n  model \(expected.keys.sorted { $0.key < $1.key })") }
                    root.model = actual
                } catch {
                    #expect(expected == nil, "round \(round): refresh (\(root.context.mergePolicy)) failed where the model did not: \(error)\n\(log.joined(separator: "\n"))")
                    outcomes["refresh refused", default: 0] += 1
                    root.context.discard()
                    continue
                }
            }
            try Self.checkIntegrity(root.context, root.model, "round \(round) before commit")
            try root.context.commit()
            stored = root.model
            try store.read { context in
                #expect(try Self.read(context) == stored, "round \(round) after commit")
                try Self.checkIntegrity(context, stored, "round \(round) committed")
            }
            #expect(try store.checkIndexEntries().isEmpty, "round \(round)")
        }
        print("RelationshipModelTests seed \(seed): \(steps) steps, \(outcomes.sorted { $0.key < $1.key })")
    }
}
