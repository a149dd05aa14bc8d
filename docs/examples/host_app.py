"""A host app that uses PersonaLab through its one door, `personalab.graph.api` (and the turn runner).

It creates a character and a background, starts an instance, plays two turns with the offline scripted model,
reads the dialogue back, rewinds to before the second turn and shows the branch it rewound to. Run it with
`PERSONALAB_DATA_DIR=/tmp/host-data python docs/examples/host_app.py` (the data folder holds the database).
"""

from __future__ import annotations

from personalab.graph.api import PersonaLab
from personalab.graph.runner import run_turn, turn_graph


def main() -> None:
    api = PersonaLab()  # the local operator on the configured database; a server passes owner=<user>
    character = api.characters.create(
        {
            "name": "雷娜",
            "persona": "冷静、寡言的雇佣兵，信守承诺。",
            "traits": "冷静, 忠诚",
            "greetings": ["你终于回来了，{{user}}。"],
        }
    )
    background = api.backgrounds.create(
        {"name": "废土复仇记", "world_setting": "核战后的废土。", "outline": ["重逢", "追查叛徒", "真相大白"]}
    )
    instance = api.instances.create({"character_id": character.id, "background_id": background.id})
    print(f"instance {instance.id}: {instance.title}")

    with turn_graph() as (graph, ctx):  # the compiled turn graph and its context, opened once for both turns
        for message in ("雷娜，我回来了。", "背叛我的人是谁？"):
            state = run_turn(graph, ctx, instance.id, message)
            print(f"turn {state['turn']}: {'error ' + str(state['error']) if state['error'] else 'ok'}")

    page = api.dialogue.history(instance.id)
    for line in page["lines"]:
        print(f"[{line['id']}] {line['attribute']}: {line['content'][:30]}")
    print(f"lines on the branch: {page['total']}")

    # rewind to the end of the first exchange (the line before the second user line): the second exchange
    # stays as a branch a swipe can bring back
    users = [number for number, line in enumerate(page["lines"]) if line["attribute"] == "user"]
    end_of_first = page["lines"][users[1] - 1]["id"]
    branch = api.dialogue.rewind(instance.id, end_of_first)
    print(f"rewound to line {branch['leaf']}; next turn {branch['turn'] + 1}")
    print(f"lines after the rewind: {api.dialogue.history(instance.id)['total']}")
    print(f"instances: {[item.id for item in api.instances.list()]}")


if __name__ == "__main__":
    main()
