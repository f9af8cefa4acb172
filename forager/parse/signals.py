"""Words and markers that product pages share across shops and languages.

Every pattern here is a flat alternation of literals (optionally with bounded gaps), so each runs
in linear time on any text; none names one shop.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

# Element names (class / id / itemprop, lower-cased) are matched as plain substrings, each list
# as one trie pattern (``*_NAMED`` below): a page has thousands of class strings, and the trie
# reads each once, where an alternation regex or ``any(word in name ...)`` tries every word.

# Containers of other products, carts, shipping notes and site chrome: a price or button inside
# one is not the page's product's.
ASIDE_NAMES = (
    "recommend",
    "related",
    "similar",
    "carousel",
    "upsell",
    "up-sell",
    "crosssell",
    "cross-sell",
    "also-bought",
    "alsobought",
    "also-viewed",
    "also-like",
    "recently",
    "sponsored",
    "compare-list",
    "compare-products",
    "comparison",
    "bundle",
    "accessor",
    "minicart",
    "mini-cart",
    "cart-total",
    "cart-summary",
    "cart-drawer",
    "cart-popup",
    "basket-box",
    "basketbox",
    "site-header",
    "page-header",
    "main-header",
    "global-header",
    "top-header",
    "header-nav",
    "header-top",
    "header-bar",
    "header-menu",
    "footer",
    "navbar",
    "megamenu",
    "mega-menu",
    "newsletter",
    "cookie",
    "shipping",
    "delivery-cost",
    "installment",
    "financ",
    "klarna",
    "leasing",
    "review",
    "comment",
    "banner",
    "other-offers",
    "you-may",
)
ASIDE_TAGS = frozenset({"header", "footer", "nav", "aside", "select", "option", "dialog"})

# An element named as a price, in the languages shops use in markup.
PRICE_NAMES = (
    "price",
    "prix",
    "preis",
    "prezzo",
    "precio",
    "preco",
    "preço",
    "cena",
    "cijena",
    "hind",
    "kaina",
    "pret",
    "fiyat",
    "цена",
    "amount",
    "cost",
)
# An element named as a former / struck price.
STRUCK_NAMES = (
    "line-through",
    "linethrough",
    "strike",
    "old",
    "was",
    "list",
    "regular",
    "original",
    "before",
    "compare",
    "rrp",
    "uvp",
    "msrp",
    "suggested",
    "crossed",
    "previous",
    "antes",
    "statt",
    "retail",
    "barr",
    "full-price",
    "fullprice",
    "initial",
    "instead",
    "durchgestrichen",
    "pvp",
)
# An element that states stock.
STOCK_NAMES = (
    "availab",
    "stock",
    "dostupn",
    "sklad",
    "lager",
    "dispon",
    "inventory",
    "verfueg",
    "verfüg",
    "voorraad",
    "zalog",
    "zalih",
    "pieejam",
    "saadaval",
    "magazyn",
    "estoque",
    "existencia",
)

# Amounts that are not the product's price (savings, instalments, shipping, per unit, net).
NOT_A_PRICE = re.compile(
    r"save|saving|economi|desconto|discount|rabatt|spar|sconto|\d\s*%|\bx\s*de\b|/\s*m[eê]s"
    r"|per month|/\s*mo\b|monthly|shipping|delivery|frete|versand|doprava|dostava|poštovné"
    r"|\bfrom\b|\bab\b|a partir|\bod\b|\bот\b|\bdès\b|\bda\b|\bvon\b|\bbis\b|per\s+(?:kg|l|m)"
    r"|/\s*(?:kg|l|m|ks|pc|pcs|stk)\b|\bmin\b|\bmax\b|rating|review"
    r"|risparmi|économ|econom|ahorr|ušetr|oszczęd|bespaar"
    r"|prihran|uštedi|sutaupy|ietaup|sääst|spor|besparing",
    re.IGNORECASE,
)
# An amount before or without tax ("zzgl. MwSt.", "bez DPH", "HT", "excl. VAT"): a price, but
# the one the shop shows as its main price wins over it only by where and how it is shown.
NET_OF_TAX = re.compile(
    r"bez dph|brez ddv|netto|excl|zzgl|ohne mwst|sans tva|\bht\b|без ндс|без пдв|χωρίς φπα",
    re.IGNORECASE,
)
# Every ``NOT_A_PRICE`` match holds a letter (its letters match only letters, in any case), a "%"
# or a "/": a text of digits and signs ("€ 17,10") is cleared without the long pattern.
_MAY_NOT_BE_PRICE = re.compile(r"[^\W\d_]|[%/]")


def not_a_price(text: str) -> bool:
    """Whether ``text`` (an amount with its label) is not the product's price (``NOT_A_PRICE``)."""
    return _MAY_NOT_BE_PRICE.search(text) is not None and NOT_A_PRICE.search(text) is not None


# "Add to cart" / "buy" in many languages (a button is shown only when the product can be bought).
BUY_WORDS = re.compile(
    r"\b(?:add to (?:cart|basket|bag|trolley)|add to shopping (?:cart|bag)|buy now|buy it now"
    r"|buy\b|purchase|order now|in den warenkorb|in den einkaufswagen|jetzt kaufen|kaufen"
    r"|ajouter au panier|acheter|adicionar ao carrinho|comprar|añadir al carrito"
    r"|agregar al carrito|aggiungi al carrello|acquista|in winkelwagen|in winkelmandje|bestellen"
    r"|lisa ostukorvi|ostukorvi|osta|adaugă în coș|adauga in cos|cumpără|dodaj do koszyka|kup"
    r"|lägg i varukorgen|köp|læg i kurv|kjøp|legg i handlekurv|do košíka|do košíku|kúpiť"
    r"|koupit|vložit do košíku|objednať|v košarico|dodaj v košarico|naroči|kupi|dodaj u košaricu"
    r"|u košaricu|ielikt grozā|pirkt|į krepšelį|pirkti|kosárba|megveszem|sepete ekle|satın al"
    r"|в корзину|купить|加入購物車|加入购物车|立即購買|立即购买|カートに入れる|購入)"
    # Scripts without capitals or word spaces: no word boundary needed around them.
    r"|장바구니|바로\s?구매|구매하기|放入购物车|放入購物車|加入购物袋|立即购买|カートに追加|今すぐ購入"
    r"|\b(?:добавить в корзину|у кошик|в кошик|купити|себетке|сатып алу|προσθήκη στο καλάθι"
    r"|στο καλάθι|αγορά|أضف إلى السلة|أضف للسلة|إضافة إلى السلة|اشتر الآن|הוספה לסל|הוסף לסל"
    r"|קנה עכשיו|לקנייה)|หยิบใส่ตะกร้า|ใส่ตะกร้า|เพิ่มลงตะกร้า|ซื้อเลย|ซื้อทันที",
    re.IGNORECASE,
)
BUY_MARK = re.compile(
    r"add-?to-?cart|addtocart|add_to_cart|add-?to-?basket|addtobasket|add-?to-?bag|buy-?now"
    r"|buy-?button|buy_button|btn-?cart|button-?cart|cart-?add|to-?basket|tobasket|buy-?btn"
    r"|purchase",
    re.IGNORECASE,
)
DISABLED_MARK = re.compile(r"disabled|unavailable|sold-?out|out-?of-?stock|notify", re.IGNORECASE)

# Sold-out statements, lower-case (matched as substrings of the lower-cased text).
SOLD_OUT = (
    "out of stock",
    "sold out",
    "currently unavailable",
    "no longer available",
    "not available",
    "unavailable",
    "cannot be bought",
    "cannot be ordered",
    "cannot be purchased",
    "not in stock",
    "nicht verfügbar",
    "nicht mehr verfügbar",
    "nicht lieferbar",
    "nicht mehr lieferbar",
    "nicht auf lager",
    "nicht vorrätig",
    "ausverkauft",
    "vergriffen",
    "épuisé",
    "rupture de stock",
    "indisponible",
    "plus disponible",
    "esaurito",
    "non disponibile",
    "agotado",
    "sin stock",
    "no disponible",
    "esgotado",
    "indisponível",
    "sem estoque",
    "niedostępny",
    "brak w magazynie",
    "wyprzedany",
    "uitverkocht",
    "niet leverbaar",
    "niet meer leverbaar",
    "niet op voorraad",
    "nedostupn",
    "vypredan",
    "vyprodan",
    "není skladem",
    "nie je skladom",
    "nelze koupit",
    "nije dostupn",
    "nema na zalihi",
    "ni na zalogi",
    "razprodano",
    "rasprodano",
    "nav pieejams",
    "izpārdots",
    "laost otsas",
    "ei ole saadaval",
    "stoc epuizat",
    "indisponibil",
    "elfogyott",
    "nem elérhető",
    "ei saatavilla",
    "loppuunmyyty",
    "slutsåld",
    "ej i lager",
    "udsolgt",
    "utsolgt",
    "ikke på lager",
    "нет в наличии",
    "распродано",
    "tükendi",
    "stokta yok",
    "缺貨",
    "售完",
    "缺货",
    "无货",
    "無貨",
    "售罄",
    "在庫切れ",
    "在庫なし",
    "売り切れ",
    "品切れ",
    "품절",
    "재고 없음",
    "재고없음",
    "немає в наявності",
    "закінчився",
    "товар закончился",
    "εξαντλήθηκε",
    "μη διαθέσιμο",
    "غير متوفر",
    "غير متاح",
    "نفدت الكمية",
    "نفذت الكمية",
    "אזל מהמלאי",
    "לא במלאי",
    "สินค้าหมด",
    "ไม่มีสินค้า",
    # "Tell me when it is back": offered only when the product cannot be bought.
    "notify me when",
    "email me when",
    "alert me when",
    "benachrichtigen, sobald",
    "benachrichtigung, wenn",
    "m'avertir",
    "avertissez-moi",
    "prévenez-moi",
    "avísame cuando",
    "avisame cuando",
    "me avise quando",
    "avvisami",
    "powiadom mnie",
    "upozornit",
    "upozorniť",
    "obavijesti me",
)
# "nie je možné … kúpiť" (Slovak: "cannot be bought"): two words around the product's name.
SOLD_OUT_PAIRS = (("nie je možné", "kúpiť"), ("není možné", "koupit"))


def literal_trie(words: Iterable[str]) -> str:
    """A pattern that finds the same match as the alternation of ``words`` longest first
    (leftmost, then the longest word there), shaped as a trie: ``re`` tries one branch per
    character at each position of the text instead of every word."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here

    def pattern(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + pattern(rest) for char, rest in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body  # greedy: the longer word first

    return pattern(root)


# Each element-name list as one pattern: whether a lower-cased name contains any of its words.
ASIDE_NAMED = re.compile(literal_trie(ASIDE_NAMES))
PRICE_NAMED = re.compile(literal_trie(PRICE_NAMES))
STRUCK_NAMED = re.compile(literal_trie(STRUCK_NAMES))
STOCK_NAMED = re.compile(literal_trie(STOCK_NAMES))

# One pass over the text instead of one per phrase ("currently unavailable" wins over
# "unavailable" where both start).
_SOLD_OUT_ANY = re.compile(literal_trie(SOLD_OUT))


def sold_out_phrase(text: str, low: str | None = None) -> str | None:
    """The sold-out statement ``text`` makes, if any (lower-case): the first one in it.
    ``low``: ``text`` lower-cased already."""
    low = text.lower() if low is None else low
    match = _SOLD_OUT_ANY.search(low)
    if match is not None:
        return match.group(0)
    for first, second in SOLD_OUT_PAIRS:  # a plain loop: this runs on every short text
        if first in low and second in low:
            return f"{first} {second}"
    return None


# A sold-out notice about another way to get the product (pickup, a store, delivery), or about
# something else on the page (chat, gift wrap), says nothing about the product's stock.
OTHER_CHANNEL = re.compile(
    r"pick ?up|store|collect|deliver|shipping|chat|packag|wrap|abholung|filiale|retrait"
    r"|magasin|ritiro|negozio|recogida|tienda|retirada|loja|odběr|vyzdvihn|predajn|prodejn"
    r"|\bmarkt|geschäft|boutique|livraison|lieferung|zustellung|versand|envío|envio|entrega"
    r"|consegna|spedizion|dostav|trgovin|poslovnic|veikal|piegād|kauplus|tarne|sklep|salon"
    r"|nearby|near you|in your area|postcode|zip code|installation|assembly|warranty|insurance"
    r"|gift|express|same.day|next.day|門市|店舗|门店|配送|自取|取貨|超商",
    re.IGNORECASE,
)
# A sold-out notice about something other than the product itself (a picture, a review, a size
# or colour, the visitor's country) says nothing about the product's stock.
OTHER_SUBJECT = re.compile(
    r"image|photo|picture|video|preview|review|rating|\bsize|colou?r|variant|option|combination"
    r"|selection|country|region|language|javascript|bild|foto|taille|talla|tamanho|größe|grösse"
    r"|groesse|taglia|velikost|veľkosť|rozmiar|maat",
    re.IGNORECASE,
)
# Pre-order / back-order offers are offers: "not available yet, pre-order now" is not sold out.
PRE_ORDER = re.compile(
    r"pre-?order|back-?order|vorbestell|précommande|precommande|pré-commande|preventa"
    r"|pre-?venda|prenota|preordina|predobjedn|przedsprzeda|voorbestel|ennakkotilaa|förbeställ",
    re.IGNORECASE,
)
# Size / colour / variant pickers: a sold-out mark inside one is about one variant, not the
# product (element names, lower-case substrings, as ``ASIDE_NAMES``).
VARIANT_NAMES = (
    "size",
    "variant",
    "swatch",
    "option",
    "taille",
    "talla",
    "tamanho",
    "groesse",
    "größe",
    "taglia",
    "velikost",
    "velicin",
    "rozmiar",
    "maat",
    "picker",
)
VARIANT_NAMED = re.compile(literal_trie(VARIANT_NAMES))
VARIANT_TAGS = frozenset({"select", "option", "label", "fieldset", "datalist"})
# In-stock statements, lower-case (matched as substrings of the lower-cased text).
IN_STOCK = (
    "in stock",
    "available",
    "ships in",
    "ships within",
    "ships today",
    "auf lager",
    "lieferbar",
    "sofort",
    "en stock",
    "disponible",
    "disponibile",
    "em estoque",
    "en existencia",
    "op voorraad",
    "skladom",
    "na sklade",
    "skladem",
    "dostępny",
    "na zalogi",
    "na zalihi",
    "dostupno",
    "dostupné",
    "noliktavā",
    "laos",
    "raktáron",
    "på lager",
    "i lager",
    "varastossa",
    "в наличии",
    "stokta",
    "有貨",
    "有货",
    "现货",
    "現貨",
    "在庫あり",
    "재고 있음",
    "구매 가능",
    "є в наявності",
    "в наявності",
    "қоймада бар",
    "διαθέσιμο",
    "σε απόθεμα",
    "متوفر",
    "متاح",
    "במלאי",
    "มีสินค้า",
)
# Matched against lower-cased text (``in_stock``): a case-blind alternation is several times
# slower in ``re``, and this one is tried on every short text after the heading.
_IN_STOCK_ANY = re.compile(literal_trie(IN_STOCK))
# Every word that ``sold_out_phrase`` or ``in_stock`` can find (a pair's first part included):
# a text without any of them states nothing about stock, found in one pass instead of two.
_STOCK_ANY = re.compile(
    literal_trie((*SOLD_OUT, *(first for first, _ in SOLD_OUT_PAIRS), *IN_STOCK))
)


def in_stock(low: str) -> bool:
    """Whether lower-cased ``low`` says the product is in stock (or available)."""
    return _IN_STOCK_ANY.search(low) is not None


# The buy box's texts repeat from page to page of a shop (its labels, notes, menus): the two
# tests each of them goes through (~2.5 µs each, ~260 µs of a 15 KB page's ~0.8 ms) are kept per
# text, for the life of a parse process, up to this many texts each.
_REPEATED_TEXTS = 4096


@lru_cache(maxsize=_REPEATED_TEXTS)
def may_state_stock(low: str) -> bool:
    """False when lower-cased ``low`` is neither a sold-out nor an in-stock statement (a cheap
    test before ``sold_out_phrase`` and ``in_stock``, which find nothing in such a text)."""
    return _STOCK_ANY.search(low) is not None


# Labels before an item number: the shop's own id first (SKU, item / product / article number),
# then global ids (EAN, GTIN, ISBN) that the benchmark also accepts.
SKU_LABEL = re.compile(
    r"^(?:sku|item\s*(?:number|no\.?|#|code|id)|product\s*(?:code|number|no\.?|id|#)|article"
    r"\s*(?:number|no\.?)|art\.?\s*-?\s*nr\.?|artikel-?\s*(?:nr\.?|nummer)|bestellnummer"
    r"|web\s*code|item\s*code|style\s*(?:number|no\.?|#)|catalog(?:ue)?\s*(?:number|no\.?)"
    r"|r[ée]f[ée]rence(?:\s*produit)?|reference|r[ée]f\.?|codice(?:\s*(?:articolo|prodotto))?"
    r"|cod\.?|c[óo]digo(?:\s*(?:do produto|de producto|del producto))?"
    r"|k[óo]d(?:\s*(?:produktu|tovaru|zboží|výrobku))?"
    r"|katal[óo]gov[ée] [čc][íi]slo|produktov[ée] [čc][íi]slo|šifra(?:\s*(?:artikla|proizvoda))?"
    r"|koda(?:\s*izdelka)?|oznaka|kataloški broj|numer katalogowy|kod produktu|indeks"
    r"|artikla kods|preces kods|tootekood|varenummer|varenr\.?|artikelnr\.?|tuotenumero"
    r"|cikkszám|post id|ad id|listing id|ad no\.?|anzeigennummer|商品編號|商品代碼|商品编号|型番"
    # Scripts without capitals: Korean, Chinese, Japanese, Cyrillic, Greek, Arabic, Hebrew, Thai.
    r"|품번|상품코드|상품번호|货号|貨號|商品编码|商品番号|品番|商品コード|артикул|арт\.|код товара"
    r"|κωδικός(?:\s*προϊόντος)?|رمز المنتج|رقم المنتج|كود المنتج|מק\"ט|מק״ט|מקט|รหัสสินค้า)"
    r"\s*[:#.：]?\s*",
    re.IGNORECASE,
)
# Hidden form fields that carry the product's id when the page adds it to the cart.
ID_FIELD = re.compile(
    r"^(?:sku|product_?id|productid|item_?id|itemid|pid|article_?id|variant_?id)$", re.I
)
# Labels before a manufacturer part number.
MPN_LABEL = re.compile(
    r"^(?:mpn|manufacturer\s*part\s*(?:number|no\.?|#)|mfr\.?\s*part\s*(?:number|no\.?|#)"
    r"|part\s*(?:number|no\.?|#)|herstellernummer|hersteller-?(?:artikel)?nr\.?"
    r"|r[ée]f[ée]rence\s*(?:fabricant|constructeur)|codice\s*produttore|n[úu]mero\s*de\s*pieza"
    r"|n[úu]mero\s*de\s*parte|제조사\s*품번|メーカー型番|制造商型号|厂商型号|код производителя"
    r"|κωδικός κατασκευαστή)\s*[:#.：]?\s*",
    re.IGNORECASE,
)
GLOBAL_ID_LABEL = re.compile(
    r"^(?:ean|gtin|isbn|upc|ean\s*kód|ean\s*code|ean-?13|upc-?a|jan\s*コード|条形码|條碼|штрихкод"
    r"|바코드)\s*[:#.：]?\s*",
    re.I,
)
# Any of the three identifier labels (a text that starts with none is not read for one).
ANY_ID_LABEL = re.compile(
    "|".join(f"(?:{label.pattern})" for label in (SKU_LABEL, GLOBAL_ID_LABEL, MPN_LABEL)),
    re.IGNORECASE,
)


@lru_cache(maxsize=_REPEATED_TEXTS)
def starts_with_id_label(text: str) -> bool:
    """Whether ``text`` starts with an item-number, GTIN or part-number label (``ANY_ID_LABEL``)."""
    return ANY_ID_LABEL.match(text) is not None


# Letters of any script ("ЧС-1500"); the value must also hold a digit (``visible._sku_after``).
SKU_VALUE = re.compile(r"[^\W_][\w\-/.]{0,39}")

# Page kinds that are not a product page, said by their title / heading.
ERROR_TITLE = re.compile(
    r"\b404\b|page not found|not found|nicht gefunden|introuvable|no encontrad|non trovat"
    r"|não encontrad|niet gevonden|nie znaleziono|nenájden|nenalezen|stránka neexistuje"
    r"|error page|page doesn.t exist|page does not exist|페이지를 찾을 수 없|ページが見つかりません"
    r"|页面不存在|找不到(?:页面|頁面|网页|網頁)|страница не найдена|сторінку не знайдено"
    r"|σελίδα δεν βρέθηκε|الصفحة غير موجودة|הדף לא נמצא|ไม่พบหน้า",
    re.IGNORECASE,
)
SEARCH_KEYS = frozenset({"q", "query", "search", "s", "k", "keyword", "keywords", "term", "text"})
SEARCH_PATH = re.compile(r"/(?:search|suche|recherche|busca|buscar|ricerca|szukaj|zoeken|hledat)\b")
