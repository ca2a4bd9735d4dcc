"""One class per kind of named node (see `base.Kind`); a new view is a new class listed here."""

from .at import At, AtRange, TopicAt, TopicAtRange, TopicAtTime
from .base import Kind
from .groups import Group, GroupAll, GroupQueue, Groups, GroupTopic
from .queue import Append, Follow, Jsonl, Lines, Queue, Tmp
from .replay import Replay
from .root import Root, Status, Topic, Topics
from .search import KeyDir, Keys, TagDir, Tags

KINDS: tuple[type[Kind], ...] = (Root, Status, Topics, Topic, Queue, Append, Jsonl, Lines, Follow, Tmp, Replay,
                                 At, AtRange, TopicAt, TopicAtTime, TopicAtRange, Tags, TagDir,
                                 Keys, KeyDir, Groups, Group, GroupTopic, GroupQueue, GroupAll)
