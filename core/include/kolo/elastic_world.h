/// \file
/// The protocol between kolorun's elastic driver and its workers, through the
/// job's authenticated rendezvous store. Not a user API: kolorun (launcher/)
/// writes it, kolo::init() in an elastic worker (core/src/elastic/) reads it.
///
/// Keys (all written with set(), values are text):
/// \verbatim
///   elastic/world                 newest world version W (decimal), driver
///   elastic/world/<W>             encodeWorld() of world W, driver, never changed
///   elastic/notice                host-update notice counter, driver; a world
///                                 whose notice is below it should re-form
///   elastic/ready/<id>            worker <id> waits for a world newer than this
///                                 value (0: it has not been in one), worker
///   elastic/reason/<id>           why worker <id> left its last world, worker
///   elastic/finished              set once the job is ending (a worker finished
///                                 or the driver stops): waiting workers give up
///   elastic/w<W>/...              the engine keys of world W (fresh per world)
/// \endverbatim
///
/// A worker \<id\> is one process started by the driver; ids are never reused.
/// Worlds only ever grow in version; a worker joins the first world newer than
/// its last one that lists it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kolo/config.h"
#include "kolo/store.h"

namespace kolo::elastic {

/// One worker's place in a world.
struct WorldMember {
  int64_t worker = 0;  ///< the driver's id of the process
  std::string host;    ///< as the driver knows it (KOLO_HOSTNAME)
  Identity identity;   ///< rank, size, local and cross rank/size in this world
};

/// One world: the set of workers that train together, with their ranks.
struct World {
  int64_t version = 0;  ///< W >= 1
  int64_t notice = 0;   ///< elastic/notice when the world was formed
  std::vector<WorldMember> members;  ///< in rank order

  /// The member entry of worker, or nullptr.
  const WorldMember* find(int64_t worker) const;
};

/// Line-based text, versioned ("kolo-world 1"); decodeWorld throws
/// kolo::Internal naming what is malformed (ranks out of order, sizes that
/// disagree, a truncated record).
std::string encodeWorld(const World& world);
/// The World that encodeWorld() wrote; throws Internal (see above).
World decodeWorld(const std::string& text);

/// The store keys of the protocol (see the file comment).
namespace keys {
inline const char kWorld[] = "elastic/world";        ///< Newest world version.
inline const char kNotice[] = "elastic/notice";      ///< Host-update notice counter.
inline const char kFinished[] = "elastic/finished";  ///< Set once the job is ending.
/// Key of world version's encodeWorld() text.
inline std::string world(int64_t version) { return "elastic/world/" + std::to_string(version); }
/// Key of the last world version worker was in (it waits for a newer one).
inline std::string ready(int64_t worker) { return "elastic/ready/" + std::to_string(worker); }
/// Key of why worker left its last world.
inline std::string reason(int64_t worker) { return "elastic/reason/" + std::to_string(worker); }
/// Prefix of the store an engine of world `version` is built on.
inline std::string worldPrefix(int64_t version) { return "elastic/w" + std::to_string(version) + "/"; }
}  // namespace keys

/// Text values of the keys above.
std::vector<char> textValue(const std::string& text);
/// The text of a value read from the store.
std::string textOf(const std::vector<char>& value);
/// A decimal value read from key; throws Internal naming key and the text
/// when it is not an integer.
int64_t integerOf(const std::vector<char>& value, const std::string& key);

/// Tells the members of world `version` that its rank `rank` is gone (the
/// driver saw the process exit), so their engines name it at once instead of
/// waiting for it to answer: their error reads "rank R failed: <why>".
/// Best effort; never throws.
void publishLostRank(Store& root, int64_t version, int rank, const std::string& why);

}  // namespace kolo::elastic
