"""Packing a whole server into a shared server (`slacker migrate --into`): what is refused at the edge, and the
load's rewrite of its objects' definer to the tenant's own account."""

import pytest

from slacker.errors import InvalidInput
from slacker.kinds import KINDS
from slacker.migration.options import MigrationOptions
from slacker.onedb_load import definer_rewrite


def test_the_definer_of_objects_is_rewritten_and_rows_are_left_as_they_are():
    rw = definer_rewrite("app:c1_app")
    view = b"/*!50013 DEFINER=`app`@`%` SQL SECURITY DEFINER */\n"
    assert rw(view) == b"/*!50013 DEFINER=`c1_app`@`%` SQL SECURITY DEFINER */\n"
    assert rw(b"CREATE DEFINER=`app`@`localhost` PROCEDURE `p`()\n") == \
        b"CREATE DEFINER=`c1_app`@`localhost` PROCEDURE `p`()\n"
    row = b"INSERT INTO `notes` VALUES (1,'DEFINER=`app`@`%`');\n"
    assert rw(row) == row  # a row's text is the tenant's data
    assert rw(b"/*!50017 DEFINER=`apple`@`%`*/\n") == b"/*!50017 DEFINER=`apple`@`%`*/\n"  # another account
    with pytest.raises(ValueError):
        definer_rewrite("app")


def test_only_a_live_move_of_a_whole_server_with_a_database_name_for_an_id_is_packed():
    server = KINDS["server"]
    assert server.move_refusal("c1", "node-1", into="shared") is None
    assert server.move_refusal("c1", "node-1", snapshot="logical", into="shared") is None
    refusal = server.move_refusal("shop-eu", "node-1", into="shared")
    assert refusal is not None and "cannot be packed into a shared server" in refusal.one_line()
    assert server.move_refusal("c1", "node-1", snapshot="logical") is not None  # a whole server's own move
    for bad in (dict(mode="stop-and-copy"), dict(keep_source_s=60.0)):
        with pytest.raises(InvalidInput, match="needs a live move"):
            MigrationOptions(target="node-2", into="shared", **bad).validate()
    with pytest.raises(InvalidInput, match="unknown tenant kind"):
        MigrationOptions(target="node-2", into="database").validate()
